//! The `airtime-node-agent` binary: flags, logging, signals; the work is in the library.

#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing_subscriber::EnvFilter;

use airtime_node_agent::config::{Cli, Config, LogFormat};

fn main() -> anyhow::Result<()> {
    // A workload's tether (see `airtime_node_agent::tether`) is this binary in another mode.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == airtime_node_agent::tether::TETHER_ARG) {
        airtime_node_agent::tether::main(args.collect());
    }
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let hostname = sysinfo::System::host_name().ok();
    let mut config = Config::resolve(cli, hostname).context("invalid configuration")?;
    // Workloads run under this binary's tether mode, so they die with this process.
    config.tether_binary = Some(std::env::current_exe().context("cannot find the agent's own binary")?);

    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (stop_tx, stop_rx) = mpsc::channel(4);
        forward_stop_signals(stop_tx).context("cannot install signal handlers")?;
        airtime_node_agent::run(config, stop_rx).await.context("node agent failed")
    })
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Turns each SIGINT or SIGTERM into a stop request: the first stops gracefully, the next kills.
fn forward_stop_signals(stop: mpsc::Sender<()>) -> std::io::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                Some(()) = interrupt.recv() => "SIGINT",
                Some(()) = terminate.recv() => "SIGTERM",
                else => break,
            };
            tracing::info!(signal = name, "received a stop signal");
            if stop.send(()).await.is_err() {
                break;
            }
        }
    });
    Ok(())
}
