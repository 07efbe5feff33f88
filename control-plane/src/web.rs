//! The dashboard: the Vite build of `web/` (a TypeScript single-page app), compiled into the binary
//! by `build.rs` so a deployment is one file. The app reads everything it shows from the REST API.
//!
//! - Files are served with their content type; hashed assets (`/assets/…`, named by Vite after their
//!   content) are cached for a year, everything else (`index.html`) is revalidated every time.
//! - Any other GET path that is not the API's, `/healthz`, `/readyz` or `/metrics` answers
//!   `index.html`: the app routes on the client (`/fleet`, `/workloads/<id>`, …), so a reload or a
//!   shared link works. The reserved prefixes keep the API's JSON 404.
//! - Every answer carries a Content-Security-Policy: scripts, styles, images and API calls from this
//!   origin only, no inline script, no framing.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::state::AppState;

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// What the dashboard may load. Inline styles are allowed (the charts position their tooltips with
/// `style` attributes); inline scripts, `eval`, plugins and framing are not.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     frame-ancestors 'none'; form-action 'self'";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const REVALIDATE: &str = "no-cache";

/// Paths the app never answers: the API and the operational endpoints keep their own 404s.
const RESERVED: &[&str] = &["/api", "/healthz", "/readyz", "/metrics"];

pub fn routes() -> Router<AppState> {
    Router::new().route("/", any(serve)).route("/{*path}", any(serve))
}

fn file(path: &str) -> Option<(&'static str, &'static [u8])> {
    FILES.iter().find(|(url, _, _)| *url == path).map(|(_, kind, bytes)| (*kind, *bytes))
}

fn reserved(path: &str) -> bool {
    RESERVED.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

async fn serve(request: Request<Body>) -> Response {
    let path = request.uri().path();
    let method = request.method();
    if (method != Method::GET && method != Method::HEAD) || reserved(path) {
        return crate::api::not_found().await.into_response();
    }
    let (found, cache) = match file(path) {
        Some(hit) if path != "/index.html" => (hit, if path.starts_with("/assets/") { IMMUTABLE } else { REVALIDATE }),
        // A missing hashed asset is a 404, not the app: a stale tab must not parse HTML as script.
        None if path.starts_with("/assets/") => return StatusCode::NOT_FOUND.into_response(),
        _ => match file("/index.html") {
            Some(index) => (index, REVALIDATE),
            None => return StatusCode::NOT_FOUND.into_response(),
        },
    };
    let (kind, bytes) = found;
    let body = if method == Method::HEAD { Body::empty() } else { Body::from(bytes) };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_and_the_probes_are_not_the_apps() {
        for path in ["/api", "/api/v1/nope", "/healthz", "/readyz", "/metrics", "/metrics/x"] {
            assert!(reserved(path), "{path}");
        }
        for path in ["/", "/fleet", "/workloads/1", "/apis", "/metricsboard", "/assets/index.js"] {
            assert!(!reserved(path), "{path}");
        }
    }

    #[test]
    fn the_build_is_embedded() {
        assert!(file("/index.html").is_some_and(|(kind, _)| kind.starts_with("text/html")));
        assert!(FILES.iter().any(|(url, kind, _)| url.starts_with("/assets/") && kind.starts_with("text/javascript")));
    }
}
