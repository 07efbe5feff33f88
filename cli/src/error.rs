//! Why a command failed, and the exit code that says so to a script (listed in `airtime --help`
//! and docs/cli.md): 1 the API refused, 2 usage, 3 unreachable or the server failed, 4 not found.

use std::fmt;

#[derive(Debug)]
pub enum Failure {
    /// The API answered 4xx (not 404): its error message.
    Refused { status: u16, message: String },
    /// 404: no such thing, or one the caller may not see.
    NotFound(String),
    /// The control plane could not be reached, or answered 5xx.
    Unreachable(String),
    /// Bad arguments or input, or nothing configured.
    Usage(String),
    /// A local step failed (writing the config file).
    Local(String),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Refused { .. } | Failure::Local(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) => 3,
            Failure::NotFound(_) => 4,
        }
    }
}

impl Failure {
    /// What to do about it, where that is not in the message: an expired or revoked credential.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Failure::Refused { status: 401, .. } => Some("log in again: airtime login"),
            _ => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused { message, .. }
            | Failure::NotFound(message)
            | Failure::Unreachable(message)
            | Failure::Usage(message)
            | Failure::Local(message) => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_failure_has_its_exit_code() {
        assert_eq!(Failure::Refused { status: 422, message: "no".into() }.exit_code(), 1);
        assert_eq!(Failure::Usage("no".into()).exit_code(), 2);
        assert_eq!(Failure::Unreachable("no".into()).exit_code(), 3);
        assert_eq!(Failure::NotFound("no".into()).exit_code(), 4);
        let expired = Failure::Refused { status: 401, message: "session expired".into() };
        assert_eq!(
            (expired.to_string().as_str(), expired.hint()),
            ("session expired", Some("log in again: airtime login"))
        );
    }
}
