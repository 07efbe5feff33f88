//! The first platform admin: `airtime-control-plane --bootstrap-admin EMAIL`, with the password from
//! `AIRTIME_BOOTSTRAP_PASSWORD` or the first line of standard input. It applies the migrations,
//! creates the user and exits. It refuses when a platform admin exists already, so it cannot be used
//! to take over an installation; there is no default password anywhere.

use std::io::BufRead as _;

use anyhow::{Context as _, bail};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::auth::{SecretString, password};

/// The environment variable the bootstrap password may come from.
pub const PASSWORD_ENV: &str = "AIRTIME_BOOTSTRAP_PASSWORD";

/// The password from `AIRTIME_BOOTSTRAP_PASSWORD`, else the first line of standard input.
pub fn read_password() -> anyhow::Result<SecretString> {
    if let Ok(from_env) = std::env::var(PASSWORD_ENV)
        && !from_env.is_empty()
    {
        return Ok(SecretString::new(from_env));
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("reading the password from standard input")?;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    if line.is_empty() {
        bail!("no password: set {PASSWORD_ENV} or write it on standard input");
    }
    Ok(SecretString::new(line))
}

/// Whether a login name is acceptable: 1 to 254 printable characters without spaces.
pub fn valid_login_name(email: &str) -> bool {
    !email.is_empty() && email.len() <= 254 && !email.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// Creates the first platform admin, unless one exists. Serialised by a transaction-level advisory
/// lock so two bootstraps at once cannot both succeed.
pub async fn create_first_admin(db: &PgPool, email: &str, password: &SecretString) -> anyhow::Result<Uuid> {
    if !valid_login_name(email) {
        bail!("the login name must be 1 to 254 characters without spaces");
    }
    password::check_strength(password).map_err(|m| anyhow::anyhow!(m))?;
    let hash = password::hash_blocking(password.clone()).await?;
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('airtime.bootstrap_admin'))").execute(&mut *tx).await?;
    let (admins,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM users WHERE platform_admin AND NOT disabled").fetch_one(&mut *tx).await?;
    if admins > 0 {
        bail!("a platform admin exists already; bootstrap refused (platform admins create further users over the API)");
    }
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO users (id, email, password_hash, platform_admin) VALUES ($1, $2, $3, true)")
        .bind(id)
        .bind(email)
        .bind(&hash)
        .execute(&mut *tx)
        .await
        .context("creating the user (is the login name taken by a user who is not an admin?)")?;
    audit::record(
        &mut tx,
        &AuditActor::system("bootstrap"),
        Change::new("user.bootstrap_admin", "user", id).detail(serde_json::json!({"email": email})),
    )
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// The `--bootstrap-admin` mode of the binary: connect, migrate, create, report, exit.
pub async fn run(database_url: &str, email: &str) -> anyhow::Result<()> {
    let password = read_password()?;
    let db = crate::db::connect(database_url, 2).await?;
    let id = create_first_admin(&db, email, &password).await?;
    tracing::info!(user = %email, %id, "created the first platform admin");
    #[allow(clippy::print_stdout)]
    {
        println!("created platform admin {email} ({id}); log in with POST /api/v1/auth/login");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_names_are_checked() {
        assert!(valid_login_name("ada@example.com"));
        assert!(valid_login_name("ada"));
        assert!(!valid_login_name(""));
        assert!(!valid_login_name("ada lovelace"));
        assert!(!valid_login_name(&"a".repeat(255)));
    }
}
