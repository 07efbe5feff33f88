//! Extractors that turn every malformed request into the API's one error shape, instead of axum's
//! plain-text rejections.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
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
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::UnsupportedMediaType("expected Content-Type: application/json".into())
        }
        JsonRejection::JsonSyntaxError(err) => {
            ApiError::bad_request("malformed_json", format!("malformed JSON: {}", inner_message(&err)))
        }
        JsonRejection::JsonDataError(err) => {
            ApiError::bad_request("invalid_body", format!("invalid request body: {}", inner_message(&err)))
        }
        JsonRejection::BytesRejection(err) => {
            if err.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::bad_request("unreadable_body", "the request body could not be read")
            }
        }
        other => ApiError::bad_request("invalid_body", other.body_text()),
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
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(QueryRejection::FailedToDeserializeQueryString(err)) => {
                Err(ApiError::bad_request("invalid_query", format!("invalid query string: {}", inner_message(&err))))
            }
            Err(other) => Err(ApiError::bad_request("invalid_query", other.body_text())),
        }
    }
}
