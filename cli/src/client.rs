//! The HTTP client of the API at `<url>/api/v1`: bearer authentication, and every answer that is
//! not a success turned into a [`Failure`] carrying the API's own error message.

use std::time::Duration;

use airtime_protocol::agent::ErrorResponse;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

use crate::error::Failure;

/// How long a request may take, except a followed log (which stays open as long as the server keeps it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Uploads and dry runs compile a module on the server first.
pub const SLOW_REQUEST_TIMEOUT: Duration = Duration::from_secs(180);

pub struct Client {
    http: reqwest::Client,
    /// The control plane as given, without a trailing `/` or `/api/v1`.
    root: String,
    token: Option<String>,
}

/// `http://host:8080`, `http://host:8080/`, `http://host:8080/api/v1` → `http://host:8080`.
pub fn normalize_url(url: &str) -> Result<String, Failure> {
    let trimmed = url.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/api/v1").unwrap_or(trimmed);
    let parsed = reqwest::Url::parse(trimmed).ok().filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
    if parsed.is_none() {
        return Err(Failure::Usage(format!(
            "{url:?} is not a control plane URL: give one like http://airtime:8080 or https://airtime.example.com"
        )));
    }
    Ok(trimmed.to_owned())
}

/// Checks that `id` is a UUID, as every id in the API is, before it goes into a path.
pub fn id(what: &str, id: &str) -> Result<uuid::Uuid, Failure> {
    uuid::Uuid::parse_str(id.trim()).map_err(|_| Failure::Usage(format!("{id:?} is not a {what} id (a UUID)")))
}

impl Client {
    pub fn new(url: &str, token: Option<String>) -> Result<Client, Failure> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("airtime-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| Failure::Local(format!("cannot set up HTTP: {}", chain(&err))))?;
        Ok(Client { http, root: normalize_url(url)?, token })
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// A request to `/api/v1{path}` with the token, if there is one.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}/api/v1{path}", self.root)).timeout(REQUEST_TIMEOUT);
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// A request to `/api/v1{path}` that may stay open without limit (a followed log).
    pub fn streaming(&self, path: &str) -> RequestBuilder {
        let req = self.http.get(format!("{}/api/v1{path}", self.root));
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Sends it; a success answers its response, anything else the failure it is.
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, Failure> {
        let resp = req.send().await.map_err(|err| self.unreachable(&err))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = resp.text().await.unwrap_or_default();
        Err(failure(status, &text, retry_after.as_deref()))
    }

    /// Sends it and reads the answer's JSON (`null` for an empty answer, as a 204's).
    pub async fn json(&self, req: RequestBuilder) -> Result<Value, Failure> {
        let resp = self.send(req).await?;
        let text = resp.text().await.map_err(|err| self.unreachable(&err))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|err| {
            Failure::Unreachable(format!(
                "the control plane at {} answered something that is not JSON: {err}",
                self.root
            ))
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.json(self.request(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        self.json(self.request(Method::POST, path).json(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        self.json(self.request(Method::PUT, path).json(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        self.json(self.request(Method::PATCH, path).json(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, Failure> {
        self.json(self.request(Method::DELETE, path)).await
    }

    pub fn unreachable(&self, err: &reqwest::Error) -> Failure {
        if err.is_timeout() {
            return Failure::Unreachable(format!("the control plane at {} did not answer in time", self.root));
        }
        Failure::Unreachable(format!("cannot reach the control plane at {}: {}", self.root, chain(err)))
    }
}

/// An error with its causes: reqwest's own text alone ("error sending request") does not say why.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What an answer that is not a success means: the API's message when it sent its error shape.
pub fn failure(status: StatusCode, body: &str, retry_after: Option<&str>) -> Failure {
    let message = match serde_json::from_str::<ErrorResponse>(body) {
        Ok(err) => err.error.message,
        Err(_) => {
            let snippet: String = body.trim().chars().take(200).collect();
            if snippet.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {snippet}") }
        }
    };
    match status.as_u16() {
        404 => Failure::NotFound(message),
        429 => {
            let wait = retry_after.map(|s| format!(" (retry after {s} s)")).unwrap_or_default();
            Failure::Refused { status: 429, message: format!("{message}{wait}") }
        }
        code @ 400..=499 => Failure::Refused { status: code, message },
        code => Failure::Unreachable(format!("the control plane failed (HTTP {code}): {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_with_or_without_the_api_prefix() {
        assert_eq!(normalize_url("http://cp:8080").unwrap(), "http://cp:8080");
        assert_eq!(normalize_url(" http://cp:8080/api/v1/ ").unwrap(), "http://cp:8080");
        assert_eq!(normalize_url("https://airtime.example.com/").unwrap(), "https://airtime.example.com");
        for bad in ["cp:8080", "localhost", "ftp://cp", "", "http://"] {
            assert!(matches!(normalize_url(bad), Err(Failure::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn the_apis_error_message_is_what_is_shown() {
        let body = r#"{"error": {"code": "invalid_workload", "message": "command must name a program"}}"#;
        let f = failure(StatusCode::UNPROCESSABLE_ENTITY, body, None);
        assert!(matches!(&f, Failure::Refused { status: 422, message } if message == "command must name a program"));
        assert_eq!(f.exit_code(), 1);
        let f = failure(
            StatusCode::NOT_FOUND,
            r#"{"error": {"code": "not_found", "message": "workload not found"}}"#,
            None,
        );
        assert_eq!((f.exit_code(), f.to_string()), (4, "workload not found".into()));
        let f =
            failure(StatusCode::TOO_MANY_REQUESTS, r#"{"error": {"code": "r", "message": "slow down"}}"#, Some("3"));
        assert_eq!(f.to_string(), "slow down (retry after 3 s)");
        let f = failure(StatusCode::BAD_GATEWAY, "<html>proxy</html>", None);
        assert_eq!(f.exit_code(), 3);
        assert!(f.to_string().contains("HTTP 502 Bad Gateway: <html>proxy</html>"), "{f}");
    }

    #[test]
    fn an_id_must_be_a_uuid_before_it_goes_into_a_path() {
        assert!(id("workload", "0190c4e2-7a4b-7c3d-9e8f-0123456789ab").is_ok());
        let Err(f) = id("workload", "../nodes") else { panic!("accepted") };
        assert_eq!((f.exit_code(), f.to_string()), (2, "\"../nodes\" is not a workload id (a UUID)".into()));
    }
}
