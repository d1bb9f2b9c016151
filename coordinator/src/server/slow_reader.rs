//! A connection whose writes may wait only so long: a client that stops reading (a stalled
//! stream, a slow reader) fails the connection after `write_timeout_s` without progress, so its
//! answer's body is dropped and the model slot, lease and places it holds are given back.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, whose writes fail with `TimedOut` after `limit` without progress.
pub(super) struct WriteTimeout<T> {
    inner: T,
    limit: Duration,
    /// Started when a write first waits; dropped when one makes progress.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteTimeout<T> {
    pub(super) fn new(inner: T, limit: Duration) -> Self {
        WriteTimeout {
            inner,
            limit,
            waiting: None,
        }
    }

    /// After a write that waits: `Pending`, or the error once the wait is past the limit.
    fn wait<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.limit;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {:.0} s: connection closed",
                    limit.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future as _;

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write(cx, buf) {
            Poll::Pending => me.wait(cx),
            done => {
                me.waiting = None;
                done
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => me.wait(cx),
            done => {
                me.waiting = None;
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Pending => me.wait(cx),
            done => {
                me.waiting = None;
                done
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_reader_that_stops_fails_the_write_and_one_that_reads_does_not() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = WriteTimeout::new(a, Duration::from_millis(200));
        // Nobody reads `b`: the pipe fills, the write waits, then fails.
        let chunk = vec![7u8; 4096];
        let e = loop {
            if let Err(e) = w.write_all(&chunk).await {
                break e;
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        // A reader that keeps reading: every write goes through.
        let (a, mut b2) = tokio::io::duplex(1024);
        let mut w = WriteTimeout::new(a, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut n = 0;
            let mut buf = [0u8; 512];
            while n < 64 * 1024 {
                n += b2.read(&mut buf).await.unwrap();
            }
            n
        });
        for _ in 0..16 {
            w.write_all(&chunk).await.unwrap();
        }
        assert_eq!(reader.await.unwrap(), 64 * 1024);
        // What the stopped reader had taken before it stopped is there, whole.
        drop(w);
        let mut first = vec![0u8; 1024];
        b.read_exact(&mut first).await.unwrap();
        assert!(first.iter().all(|x| *x == 7));
    }
}
