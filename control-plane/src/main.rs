use airtime_control_plane::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args_os().nth(1).is_some_and(|a| a == airtime_control_plane::policies::catalog::COMPILE_PROBE_ARG) {
        std::process::exit(airtime_control_plane::policies::catalog::compile_probe_main());
    }
    let config = match Config::try_from_args(std::env::args_os()) {
        Ok(mut config) => {
            config.compile_probe = std::env::current_exe().ok();
            config
        }
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
