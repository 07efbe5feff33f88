use airtime_control_plane::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = match Config::try_from_args(std::env::args_os()) {
        Ok(config) => config,
        Err(airtime_control_plane::config::ConfigError::Parse(err)) => err.exit(),
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(2);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
        LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).init(),
    }
    if let Some(email) = &config.bootstrap_admin {
        return airtime_control_plane::auth::bootstrap::run(&config.database_url, email).await;
    }
    airtime_control_plane::serve(config).await
}
