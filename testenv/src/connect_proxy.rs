//! An HTTP CONNECT proxy, as a kubeconfig's `proxy-url` names one: it tunnels each
//! connection to where its CONNECT asks and records the request heads it was sent. Its tasks
//! end when it is dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct ConnectProxy {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    accepting: JoinHandle<()>,
}

impl ConnectProxy {
    /// A proxy on a free loopback port.
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let asked = Arc::new(Mutex::new(Vec::new()));
        let recorded = asked.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(tunnel(client, recorded.clone()));
            }
        });
        Ok(Self {
            addr,
            asked,
            accepting,
        })
    }

    /// `http://127.0.0.1:<port>`, with `userinfo@` if given.
    pub fn url(&self, userinfo: Option<&str>) -> String {
        let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        format!("http://{userinfo}{}", self.addr)
    }

    /// The heads of the CONNECT requests served so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn tunnel(mut client: TcpStream, asked: Arc<Mutex<Vec<String>>>) {
    let head = read_head(&mut client).await;
    let to = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    asked.lock().unwrap().push(head.clone());
    let Ok(mut upstream) = TcpStream::connect(&to).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_ok()
    {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// A request's head, up to its blank line (what was read if the peer closed first).
pub async fn read_head(socket: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}
