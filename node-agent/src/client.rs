//! The HTTP client side of the agent protocol: one method per call, typed messages in and out.
//! It knows nothing of retries or loops; callers decide with [`ClientError::is_retryable`].

use std::error::Error as _;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use uuid::Uuid;

use crate::credential::Secret;
use crate::protocol::{
    DesiredState, EnrolRequest, Enrolled, ErrorResponse, EventReport, LogBatch, Registered, Registration,
    TelemetryReport, codes,
};

/// Bound on a plain call; a control plane slower than this is treated as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra time a long-poll may take past its `wait_ms` before the agent gives up on it.
const LONG_POLL_MARGIN: Duration = Duration::from_secs(10);
/// The protocol's cap on `wait_ms`.
pub const MAX_WAIT: Duration = Duration::from_millis(30_000);

#[derive(Debug, Error)]
pub enum ClientError {
    /// No HTTP answer: connection refused, reset, timed out.
    #[error("control plane unreachable: {0}")]
    Network(String),
    /// An HTTP answer with an error status, in the API's error shape when it had one.
    #[error("control plane answered {status}: {code}: {message}")]
    Api { status: StatusCode, code: String, message: String },
    /// A success status whose body is not the expected message.
    #[error("unexpected answer from the control plane: {0}")]
    Decode(String),
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

impl ClientError {
    /// Worth trying again unchanged: no answer, or a server-side failure.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Network(_) => true,
            Self::Api { status, .. } => status.is_server_error(),
            Self::Decode(_) | Self::Build(_) => false,
        }
    }

    /// The control plane does not know this node: register again.
    pub fn is_node_not_found(&self) -> bool {
        self.is_api(StatusCode::NOT_FOUND, codes::NODE_NOT_FOUND)
    }

    /// The credential (or enrolment token) was refused: revoked, expired, used or unknown.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, Self::Api { status, .. } if *status == StatusCode::UNAUTHORIZED)
    }

    /// The event's attempt is no longer current: drop the event.
    pub fn is_stale_attempt(&self) -> bool {
        self.is_api(StatusCode::CONFLICT, codes::STALE_ATTEMPT)
    }

    fn is_api(&self, expected_status: StatusCode, expected_code: &str) -> bool {
        matches!(self, Self::Api { status, code, .. } if *status == expected_status && code == expected_code)
    }

    fn network(error: &reqwest::Error) -> Self {
        // reqwest's own message ("error sending request") hides the cause; keep the chain.
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::Network(message)
    }
}

/// A client for one control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneClient {
    http: reqwest::Client,
    /// `…/api/v1/agent`, without a trailing slash.
    base: String,
    /// `Bearer <node credential>`, marked sensitive; set once the node has enrolled.
    credential: Arc<RwLock<Option<HeaderValue>>>,
}

impl ControlPlaneClient {
    pub fn new(control_plane: &Url) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("airtime-node-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        let base = format!("{}/api/v1/agent", control_plane.as_str().trim_end_matches('/'));
        Ok(Self { http, base, credential: Arc::default() })
    }

    /// Sends `credential` as `Authorization: Bearer` on every later call.
    pub fn set_credential(&self, credential: &Secret) -> Result<(), ClientError> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", credential.expose()))
            .map_err(|_| ClientError::Build("the node credential is not a valid header value".into()))?;
        value.set_sensitive(true);
        *self.credential.write().unwrap_or_else(PoisonError::into_inner) = Some(value);
        Ok(())
    }

    pub fn has_credential(&self) -> bool {
        self.credential.read().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let credential = self.credential.read().unwrap_or_else(PoisonError::into_inner).clone();
        match credential {
            Some(value) => request.header(AUTHORIZATION, value),
            None => request,
        }
    }

    /// Exchanges a one-time enrolment token for the node's own credential.
    pub async fn enrol(&self, token: &Secret, name: &str) -> Result<Enrolled, ClientError> {
        let url = format!("{}/enrol", self.base);
        let request = EnrolRequest { enrolment_token: token.expose().to_owned(), name: name.to_owned() };
        let response = self.send_json(self.http.post(url), &request, REQUEST_TIMEOUT).await?;
        decode(response).await
    }

    pub async fn register(&self, request: &Registration) -> Result<Registered, ClientError> {
        let url = format!("{}/register", self.base);
        let response = self.send_json(self.http.post(url), request, REQUEST_TIMEOUT).await?;
        decode(response).await
    }

    pub async fn send_telemetry(&self, node_id: Uuid, report: &TelemetryReport) -> Result<(), ClientError> {
        let url = format!("{}/nodes/{node_id}/telemetry", self.base);
        self.send_json(self.http.post(url), report, REQUEST_TIMEOUT).await.map(drop)
    }

    /// Long-polls the node's desired state: answers at once when its version is past `after`,
    /// otherwise after at most `wait` (capped at [`MAX_WAIT`]).
    pub async fn assignments(&self, node_id: Uuid, after: u64, wait: Duration) -> Result<DesiredState, ClientError> {
        let wait = wait.min(MAX_WAIT);
        let url = format!("{}/nodes/{node_id}/assignments?after={after}&wait_ms={}", self.base, wait.as_millis());
        let request = self.authorized(self.http.get(url)).timeout(wait + LONG_POLL_MARGIN);
        let response = request.send().await.map_err(|e| ClientError::network(&e))?;
        decode(check_status(response).await?).await
    }

    pub async fn post_event(&self, node_id: Uuid, workload_id: Uuid, event: &EventReport) -> Result<(), ClientError> {
        let url = format!("{}/nodes/{node_id}/workloads/{workload_id}/events", self.base);
        self.send_json(self.http.post(url), event, REQUEST_TIMEOUT).await.map(drop)
    }

    /// Workloads' output, in chunks the control plane stores once each.
    pub async fn post_logs(&self, node_id: Uuid, batch: &LogBatch) -> Result<(), ClientError> {
        let url = format!("{}/nodes/{node_id}/logs", self.base);
        self.send_json(self.http.post(url), batch, REQUEST_TIMEOUT).await.map(drop)
    }

    async fn send_json<T: Serialize + ?Sized>(
        &self,
        request: reqwest::RequestBuilder,
        body: &T,
        timeout: Duration,
    ) -> Result<reqwest::Response, ClientError> {
        let response =
            self.authorized(request).json(body).timeout(timeout).send().await.map_err(|e| ClientError::network(&e))?;
        check_status(response).await
    }
}

/// Turns an error status into [`ClientError::Api`], reading the API's error shape when present.
async fn check_status(response: reqwest::Response) -> Result<reqwest::Response, ClientError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.map_err(|e| ClientError::network(&e))?;
    Err(match serde_json::from_str::<ErrorResponse>(&body) {
        Ok(parsed) => ClientError::Api { status, code: parsed.error.code, message: parsed.error.message },
        Err(_) => ClientError::Api { status, code: "unknown".into(), message: body.chars().take(200).collect() },
    })
}

async fn decode<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, ClientError> {
    let bytes = response.bytes().await.map_err(|e| ClientError::network(&e))?;
    serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: StatusCode, code: &str) -> ClientError {
        ClientError::Api { status, code: code.into(), message: String::new() }
    }

    #[test]
    fn classifies_answers() {
        assert!(ClientError::Network("refused".into()).is_retryable());
        assert!(api(StatusCode::SERVICE_UNAVAILABLE, "unavailable").is_retryable());
        assert!(!api(StatusCode::BAD_REQUEST, "invalid_request").is_retryable());
        assert!(api(StatusCode::NOT_FOUND, "node_not_found").is_node_not_found());
        assert!(!api(StatusCode::NOT_FOUND, "unknown").is_node_not_found());
        assert!(api(StatusCode::CONFLICT, "stale_attempt").is_stale_attempt());
        assert!(!ClientError::Decode("x".into()).is_retryable());
    }

    #[test]
    fn builds_urls_under_the_agent_prefix() -> Result<(), Box<dyn std::error::Error>> {
        for raw in ["http://cp:8080", "http://cp:8080/", "http://cp:8080/prefix/"] {
            let client = ControlPlaneClient::new(&Url::parse(raw)?)?;
            assert!(client.base.ends_with("/api/v1/agent"), "{}", client.base);
            assert!(!client.base.contains("//api"), "{}", client.base);
        }
        Ok(())
    }

    #[tokio::test]
    async fn unreachable_control_plane_is_a_retryable_network_error() -> Result<(), Box<dyn std::error::Error>> {
        // Bind then drop a listener so the port is (almost certainly) closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let client = ControlPlaneClient::new(&Url::parse(&format!("http://127.0.0.1:{port}"))?)?;
        let error = client
            .send_telemetry(
                Uuid::nil(),
                &TelemetryReport { cpu_util: 0.0, memory_used_mb: 0, gpus: vec![], shares: vec![], replicas: vec![] },
            )
            .await
            .err()
            .ok_or("no error from a closed port")?;
        assert!(error.is_retryable(), "{error}");
        assert!(matches!(error, ClientError::Network(_)), "{error}");
        Ok(())
    }
}
