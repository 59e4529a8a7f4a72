//! Connections whose writes leave only while the leader's fence is open. The fence layer
//! checks a write when its future is first polled; this checks every write of bytes onto the
//! connection, the moment they would leave: a connection can take seconds to open (SYNs
//! retransmitted, a slow TLS handshake), and a process can be paused anywhere in between. A
//! write refused here never reached the server (`client::may_have_acted`), even if a request
//! was cut off mid-way: the server discards a request it did not receive whole.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower::{BoxError, Service};

use super::fence::Admit;
use crate::fence::Fence;

/// A connector whose connections are [`Gated`] by `fence`.
#[derive(Clone)]
pub struct GatedConnector<C> {
    pub inner: C,
    pub fence: Fence,
}

impl<C> Service<Uri> for GatedConnector<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Gated<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (connecting, fence) = (self.inner.call(uri), self.fence.clone());
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            Ok(Gated { io, fence })
        })
    }
}

/// A connection whose bytes leave only while the fence is open.
pub struct Gated<T> {
    io: T,
    fence: Fence,
}

impl<T: Read + Unpin> Read for Gated<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Gated<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Err(refused) = self.fence.admit() {
            return Poll::Ready(Err(std::io::Error::other(refused)));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Err(refused) = self.fence.admit() {
            return Poll::Ready(Err(std::io::Error::other(refused)));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Gated<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::AsyncReadExt;

    /// Issue 26, fault 2: bytes written once the fence closed never reach the peer.
    #[tokio::test]
    async fn no_byte_leaves_once_the_fence_closed() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let fence = Fence::closed();
        fence.open_until(tokio::time::Instant::now() + std::time::Duration::from_secs(60));
        let mut gated = Gated {
            io: TokioIo::new(ours),
            fence: fence.clone(),
        };
        async fn write<T: Write + Unpin>(
            gated: &mut Gated<T>,
            bytes: &[u8],
        ) -> std::io::Result<usize> {
            std::future::poll_fn(|cx| Pin::new(&mut *gated).poll_write(cx, bytes)).await
        }
        write(&mut gated, b"open ").await.unwrap();
        fence.close();
        let refused = write(&mut gated, b"closed").await.unwrap_err();
        assert!(
            refused
                .get_ref()
                .is_some_and(|e| e.is::<crate::client::NotLeading>()),
            "{refused}"
        );
        drop(gated);
        let mut received = String::new();
        theirs.read_to_string(&mut received).await.unwrap();
        assert_eq!(received, "open ");
    }
}
