//! Container workloads: what a submission names (an OCI image, its entrypoint, working directory
//! and host mounts), what a node's agent reports of its container engine, and the checks both pass.
//! One definition for the API, the assignment the agent receives, and the agent's runner.

use serde::{Deserialize, Serialize};

/// An OCI image a workload runs in, and how. The workload's `command` is the image's arguments
/// (empty: the image's own `CMD`), its `env` the container's environment; its CPU and memory
/// request become the container's limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// An image reference: `registry.example.com/team/model:1.2`, `localhost/eval:dev`, or one
    /// pinned by digest (`…@sha256:…`).
    pub image: String,
    /// Replaces the image's `ENTRYPOINT` (program, then arguments); absent: the image's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The directory the workload starts in, inside the container (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Host directories the container sees; each source must lie under a directory the platform
    /// allows (the control plane's `--container-mount-prefix`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

/// A host directory bound into a container.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Absolute path on the node.
    pub source: String,
    /// Absolute path inside the container.
    pub target: String,
    #[serde(default)]
    pub read_only: bool,
}

/// The most mounts one container may have.
pub const MAX_MOUNTS: usize = 32;
/// The longest image reference, in bytes.
pub const MAX_IMAGE_REFERENCE: usize = 512;

/// Which container engine a node runs containers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    Podman,
    Docker,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Podman => "podman",
            EngineKind::Docker => "docker",
        }
    }
}

/// A node's container engine, as its agent found it at start (registration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ContainerEngine {
    pub kind: EngineKind,
    /// The engine's own version string.
    pub version: String,
    /// GPUs reach containers through CDI (`--device nvidia.com/gpu=…`): the NVIDIA container
    /// toolkit's CDI specification is installed on the node.
    #[serde(default)]
    pub cdi: bool,
}

/// Longest engine version kept, in characters.
pub const MAX_ENGINE_VERSION_CHARS: usize = 100;

fn printable(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

/// Whether `path` is absolute, normalised (no `.` or `..` component, no empty component), and
/// printable.
fn absolute_clean(path: &str) -> bool {
    path.starts_with('/')
        && path.len() <= 4096
        && printable(path)
        && (path == "/" || path[1..].split('/').all(|c| !c.is_empty() && c != "." && c != ".."))
}

/// Whether `path` is `prefix` or lies under it (component-wise: `/data2` is not under `/data`).
pub fn path_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty() || path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

impl ContainerSpec {
    /// A precise reason the spec is refused; `allowed_mounts` are the host directories the
    /// platform lets containers mount (each source must be one of them or under one).
    pub fn check(&self, allowed_mounts: &[String]) -> Result<(), String> {
        let image = &self.image;
        let image_chars = |c: char| c.is_ascii_alphanumeric() || "._-/:@+".contains(c);
        if image.is_empty() || image.len() > MAX_IMAGE_REFERENCE || !image.chars().all(image_chars) {
            return Err(format!(
                "container.image must be an image reference (1 to {MAX_IMAGE_REFERENCE} characters of letters, digits and ._-/:@+), not {image:?}"
            ));
        }
        if image.starts_with(['-', '.', '/', ':', '@']) || image.ends_with([':', '/', '@']) {
            return Err(format!("container.image {image:?} is not an image reference"));
        }
        if let Some(entrypoint) = &self.entrypoint
            && (entrypoint.is_empty()
                || entrypoint[0].is_empty()
                || entrypoint.len() > 1024
                || entrypoint.iter().any(|a| a.contains('\0')))
        {
            return Err("container.entrypoint must name a program (1 to 1024 arguments, no NUL byte)".into());
        }
        if let Some(dir) = &self.working_dir
            && !absolute_clean(dir)
        {
            return Err(format!("container.working_dir must be an absolute path without . or .., not {dir:?}"));
        }
        if self.mounts.len() > MAX_MOUNTS {
            return Err(format!("a container may have at most {MAX_MOUNTS} mounts"));
        }
        for (i, mount) in self.mounts.iter().enumerate() {
            for (what, path) in [("source", &mount.source), ("target", &mount.target)] {
                // ':' and ',' separate the engine's own options (`:U` chowns the source, `:O`
                // overlays it): a mount is the paths alone.
                if !absolute_clean(path) || path.contains([',', ':']) {
                    return Err(format!(
                        "container.mounts[{i}].{what} must be an absolute path without ., .., ':' or ',' (no \
                         engine options such as :U or :O), not {path:?}"
                    ));
                }
            }
            if !allowed_mounts.iter().any(|prefix| path_under(&mount.source, prefix)) {
                return Err(if allowed_mounts.is_empty() {
                    format!(
                        "container.mounts[{i}]: this platform allows no host mounts (an administrator allows \
                         directories with --container-mount-prefix)"
                    )
                } else {
                    format!(
                        "container.mounts[{i}].source {} is not under a directory this platform allows ({})",
                        mount.source,
                        allowed_mounts.join(", ")
                    )
                });
            }
            if self.mounts[..i].iter().any(|m| m.target == mount.target) {
                return Err(format!("container.mounts[{i}].target {} is mounted twice", mount.target));
            }
        }
        Ok(())
    }
}

impl ContainerEngine {
    pub fn check(&self) -> Result<(), String> {
        if self.version.is_empty()
            || self.version.chars().count() > MAX_ENGINE_VERSION_CHARS
            || !printable(&self.version)
        {
            return Err(format!(
                "container_engine.version must be 1 to {MAX_ENGINE_VERSION_CHARS} printable characters"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(image: &str) -> ContainerSpec {
        ContainerSpec { image: image.into(), entrypoint: None, working_dir: None, mounts: vec![] }
    }

    fn mount(source: &str, target: &str) -> Mount {
        Mount { source: source.into(), target: target.into(), read_only: false }
    }

    #[test]
    fn image_references_are_checked() {
        for good in ["busybox", "localhost/airtime-test:1", "ghcr.io/org/model:v1.2-cuda12", "img@sha256:ab12"] {
            assert_eq!(spec(good).check(&[]), Ok(()), "{good}");
        }
        for bad in ["", "-rm", "busy box", "img:", "a;b", "/abs", "x\ny"] {
            assert!(spec(bad).check(&[]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mounts_must_lie_under_an_allowed_directory() {
        let allowed = vec!["/data".to_owned(), "/models/".to_owned()];
        let mut s = spec("busybox");
        s.mounts = vec![mount("/data/set1", "/in"), mount("/models", "/models")];
        assert_eq!(s.check(&allowed), Ok(()));

        s.mounts = vec![mount("/data2", "/in")];
        let error = s.check(&allowed).unwrap_err();
        assert!(error.contains("/data2 is not under a directory this platform allows (/data, /models/)"), "{error}");
        s.mounts = vec![mount("/data/../etc", "/in")];
        assert!(s.check(&allowed).unwrap_err().contains("without ., .."));
        s.mounts = vec![mount("/data/a", "/in"), mount("/data/b", "/in")];
        assert!(s.check(&allowed).unwrap_err().contains("mounted twice"));
        s.mounts = vec![mount("/data/a", "/in")];
        assert!(s.check(&[]).unwrap_err().contains("allows no host mounts"));
    }

    #[test]
    fn paths_are_compared_by_component() {
        assert!(path_under("/data", "/data"));
        assert!(path_under("/data/x", "/data/"));
        assert!(!path_under("/database", "/data"));
        assert!(path_under("/anything", "/"));
    }

    #[test]
    fn entrypoint_and_working_dir_are_checked() {
        let mut s = spec("busybox");
        s.entrypoint = Some(vec![]);
        assert!(s.check(&[]).is_err());
        s.entrypoint = Some(vec!["/bin/sh".into(), "-c".into()]);
        s.working_dir = Some("work".into());
        assert!(s.check(&[]).unwrap_err().contains("working_dir"));
        s.working_dir = Some("/work".into());
        assert_eq!(s.check(&[]), Ok(()));
    }
}
