//! Extractors that turn every malformed request into the API's one error shape, instead of axum's
//! plain-text rejections.
//!
//! They are also the one place that refuses a NUL character in request text (a JSON string's
//! `\u0000`, a `%00` in a query string or a path): PostgreSQL's `text` cannot hold one, and text is
//! parsed into types here, at the edge, so no handler has to remember it. Guest text is cleaned
//! where it is decoded instead (`airtime_policy_sdk::text`).

use airtime_protocol::text::{json_has_nul, uri_has_nul};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// JSON body. Unknown fields are refused by the target types (`deny_unknown_fields`).
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<media_type::Essence>().ok())
            .is_some_and(|essence| essence.is_json());
        if !json_type {
            return Err(ApiError::UnsupportedMediaType("expected Content-Type: application/json".into()));
        }
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => bytes,
            Err(err) if err.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::PayloadTooLarge);
            }
            Err(_) => return Err(ApiError::bad_request("unreadable_body", "the request body could not be read")),
        };
        if json_has_nul(&bytes) {
            return Err(nul_refused("the request body"));
        }
        match serde_json::from_slice::<T>(&bytes) {
            Ok(value) => Ok(Json(value)),
            Err(err) if err.is_data() => {
                Err(ApiError::bad_request("invalid_body", format!("invalid request body: {err}")))
            }
            Err(err) => Err(ApiError::bad_request("malformed_json", format!("malformed JSON: {err}"))),
        }
    }
}

fn nul_refused(where_: &str) -> ApiError {
    ApiError::bad_request("nul_character", format!("{where_} contains a NUL character, which no text field may hold"))
}

/// A media type's essence, enough to recognise JSON (`application/json`, `application/*+json`).
mod media_type {
    pub struct Essence(String);

    impl std::str::FromStr for Essence {
        type Err = ();
        fn from_str(s: &str) -> Result<Self, ()> {
            let essence = s.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            if essence.is_empty() { Err(()) } else { Ok(Essence(essence)) }
        }
    }

    impl Essence {
        pub fn is_json(&self) -> bool {
            let Some((kind, sub)) = self.0.split_once('/') else { return false };
            kind == "application" && (sub == "json" || sub.ends_with("+json"))
        }
    }
}

/// serde's message without axum's prefix ("Failed to deserialize the JSON body into the target type: ").
fn inner_message(err: &dyn std::error::Error) -> String {
    let mut source: &dyn std::error::Error = err;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}

/// Path parameters, e.g. a UUID that does not parse gives 400 rather than a plain-text answer.
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if uri_has_nul(parts.uri.path()) {
            return Err(nul_refused("the path"));
        }
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    match rejection {
        PathRejection::FailedToDeserializePathParams(err) => {
            ApiError::bad_request("invalid_path", format!("invalid path parameter: {}", err.body_text()))
        }
        other => ApiError::bad_request("invalid_path", other.body_text()),
    }
}

/// Query string parameters.
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.uri.query().is_some_and(uri_has_nul) {
            return Err(nul_refused("the query string"));
        }
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(QueryRejection::FailedToDeserializeQueryString(err)) => {
                Err(ApiError::bad_request("invalid_query", format!("invalid query string: {}", inner_message(&err))))
            }
            Err(other) => Err(ApiError::bad_request("invalid_query", other.body_text())),
        }
    }
}
