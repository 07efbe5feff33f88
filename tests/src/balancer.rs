//! A TCP load balancer in front of control-plane replicas, as a Kubernetes Service or HAProxy is:
//! each new connection goes to the next replica in turn, and to the one after it when that one
//! refuses (it is shutting down, or gone). Connections already open stay with their replica until
//! either side closes them — so a replica stopped gracefully finishes what it was answering, and
//! a client's next request opens a connection to a replica that is up.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};

/// A balancer listening on a free local port.
pub struct Balancer {
    pub url: String,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    /// Balances over the replicas at `urls` (`http://host:port`).
    pub async fn start(urls: &[&str]) -> anyhow::Result<Balancer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let backends = Arc::new(Mutex::new(urls.iter().map(|u| address(u)).collect::<anyhow::Result<Vec<_>>>()?));
        let next = Arc::new(AtomicUsize::new(0));
        let shared = Arc::clone(&backends);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let candidates = shared.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let first = next.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    for i in 0..candidates.len() {
                        let backend = candidates[(first + i) % candidates.len()];
                        if let Ok(mut server) = TcpStream::connect(backend).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            return;
                        }
                    }
                    // None accepted: the client sees its connection closed, as behind a
                    // Service with no ready endpoint.
                });
            }
        });
        Ok(Balancer { url, backends, task })
    }

    /// Replaces the replica at `old` with the one at `new` (a replica restarted on a new port):
    /// new connections go to it from now on.
    pub fn replace(&self, old: &str, new: &str) -> anyhow::Result<()> {
        let (old, new) = (address(old)?, address(new)?);
        let mut backends = self.backends.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = backends.iter_mut().find(|b| **b == old).ok_or_else(|| anyhow::anyhow!("{old} is not balanced"))?;
        *slot = new;
        Ok(())
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn address(url: &str) -> anyhow::Result<SocketAddr> {
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    Ok(hostport.parse()?)
}
