//! The one API error type. Every failure a client can see renders as
//! `{"error": {"code": "...", "message": "..."}}` with a 4xx or 5xx status. Database and unexpected
//! errors are logged with their detail and answered with an opaque 500: no SQL, no internals.

use airtime_protocol::agent::{ErrorBody, ErrorResponse};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed (bad JSON, unknown field, wrong type, bad query).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// 401 with `WWW-Authenticate: Bearer`: no credential, or one that is malformed, forged,
    /// expired or revoked. The message never says which user or token exists.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 403: the caller is known and sees the resource (or the route is not tenant data), but their
    /// role does not allow this. Never used for another tenant's resource: that is a 404.
    #[error("{0}")]
    Forbidden(String),
    /// 404: the resource does not exist (or is not the caller's to see).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 404 with code `node_not_found`: an agent names a node the control plane does not know; the
    /// agent registers again.
    #[error("node not found; register again")]
    NodeNotFound,
    /// 409: the request conflicts with the current state (e.g. cancelling a finished workload).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// 413: the body is larger than the route accepts.
    #[error("request body is larger than this route accepts")]
    PayloadTooLarge,
    /// 429 with `Retry-After`: too many requests from this credential (or login attempts).
    #[error("too many requests; retry in {retry_after_s} s")]
    TooManyRequests { retry_after_s: u64 },
    /// 415: wrong content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: well-formed but invalid (a value out of range, a policy module that fails its checks).
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// 503: a dependency (the database) is unavailable.
    #[error("{0}")]
    Unavailable(String),
    /// 500: logged in full, answered opaquely.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest { code, message: message.into() }
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::Conflict { code, message: message.into() }
    }
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::Unprocessable { code, message: message.into() }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::Forbidden(message.into())
    }
    /// 429 for a wait, rounded up to whole seconds (at least 1).
    pub fn too_many_requests(wait: std::time::Duration) -> Self {
        let rounded_up = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Self::TooManyRequests { retry_after_s: rounded_up.max(1) }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound(_) | Self::NodeNotFound => StatusCode::NOT_FOUND,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. } | Self::Conflict { code, .. } | Self::Unprocessable { code, .. } => code,
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::TooManyRequests { .. } => "rate_limited",
            Self::NotFound(_) => "not_found",
            Self::NodeNotFound => "node_not_found",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(err) = &self {
            tracing::error!(error = format!("{err:#}"), "internal error answering a request");
        }
        let body = ErrorResponse { error: ErrorBody { code: self.code().to_owned(), message: self.to_string() } };
        let mut response = (self.status(), Json(body)).into_response();
        match &self {
            Self::Unauthorized(_) => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"airtime\""));
            }
            Self::TooManyRequests { retry_after_s } => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            _ => {}
        }
        response
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::RowNotFound => Self::NotFound("resource"),
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::error!(error = %err, "database unavailable");
                Self::Unavailable("the database is unavailable; try again".into())
            }
            _ => Self::Internal(err.into()),
        }
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(err: anyhow::Error) -> Self {
        Self::Internal(err)
    }
}

impl From<crate::domain::Error> for ApiError {
    fn from(err: crate::domain::Error) -> Self {
        use crate::domain::Error as E;
        match err {
            E::NotFound(what) => Self::NotFound(what),
            E::Invalid { code, message } => Self::Unprocessable { code, message },
            E::BadQuery { code, message } => Self::BadRequest { code, message },
            E::Conflict { code, message } => Self::Conflict { code, message },
            E::Forbidden(message) => Self::Forbidden(message),
            E::Database(err) => Self::from(err),
            E::Unavailable(message) => Self::Unavailable(message),
            E::Internal(err) => Self::Internal(err),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
