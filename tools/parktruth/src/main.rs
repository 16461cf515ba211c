//! dial9-parktruth: workloads whose tasks park at a known await, for dial9-bpf's park-point
//! tests. Each mode keeps its own ground truth and prints it as one JSON line at the end.
//!
//! - `join`: each task joins a receive that is fed late (Pending) with a semaphore acquire that
//!   is ready at once (Ready), receive first: the task parks in the receive.
//! - `select`: each task selects (biased: the sleep first) a sleep and a `Notified`, both
//!   Pending; a notifier wakes it at random times, so either branch fires.
//! - `handle`: each task awaits the JoinHandle of a child that sleeps (Pending), then polls a
//!   ready acquire: the task parks in the JoinHandle.
//! - `server`: a TCP server on 127.0.0.1 whose connection tasks poll like hyper's dispatcher:
//!   read requests until the read is Pending, then write and flush the replies (Ready), then
//!   wait for the next request: the task parks in the read.
//!
//! Must build with rustc 1.63 (Debian 12) and current stable, offline, from Debian's crates.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, Semaphore};

static JOIN_ROUNDS: AtomicU64 = AtomicU64::new(0);
static HANDLE_ROUNDS: AtomicU64 = AtomicU64::new(0);
static SELECT_SLEEP_FIRED: AtomicU64 = AtomicU64::new(0);
static SELECT_NOTIFY_FIRED: AtomicU64 = AtomicU64::new(0);
static CONN_REQUESTS: AtomicU64 = AtomicU64::new(0);
static CONN_READ_PENDING: AtomicU64 = AtomicU64::new(0);
static CONN_WRITE_PENDING: AtomicU64 = AtomicU64::new(0);
static CONN_POLLS_PENDING: AtomicU64 = AtomicU64::new(0);

const REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";

fn emit(line: &str) {
    let out = std::io::stdout();
    let mut out = out.lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// xorshift64: jitter only, no quality needed.
fn next_rand(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

// ---------------------------------------------------------------------------------------------
// join: a pending receive and a ready acquire
// ---------------------------------------------------------------------------------------------

#[inline(never)]
async fn join_kind_task(mut rx: mpsc::Receiver<u64>, sem: Arc<Semaphore>) {
    loop {
        let (v, permit) = tokio::join!(rx.recv(), sem.acquire());
        drop(permit);
        if v.is_none() {
            return;
        }
        JOIN_ROUNDS.fetch_add(1, Ordering::Relaxed);
    }
}

async fn join_feeder(tx: mpsc::Sender<u64>, seed: u64) {
    let mut rng = seed | 1;
    for i in 0.. {
        tokio::time::sleep(Duration::from_micros(500 + next_rand(&mut rng) % 1500)).await;
        if tx.send(i).await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// handle: a pending JoinHandle, then a ready acquire
// ---------------------------------------------------------------------------------------------

#[inline(never)]
async fn handle_kind_task(sem: Arc<Semaphore>, seed: u64) {
    let mut rng = seed | 1;
    loop {
        let d = Duration::from_micros(500 + next_rand(&mut rng) % 1500);
        let child = tokio::spawn(async move {
            tokio::time::sleep(d).await;
            d.as_micros() as u64
        });
        let (v, permit) = tokio::join!(child, sem.acquire());
        drop(permit);
        if v.is_err() {
            return;
        }
        HANDLE_ROUNDS.fetch_add(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------------
// select: two pending futures
// ---------------------------------------------------------------------------------------------

#[inline(never)]
async fn select_kind_task(notify: Arc<Notify>, seed: u64) {
    let mut rng = seed | 1;
    loop {
        let d = Duration::from_micros(1000 + next_rand(&mut rng) % 3000);
        tokio::select! {
            biased;
            _ = tokio::time::sleep(d) => { SELECT_SLEEP_FIRED.fetch_add(1, Ordering::Relaxed); }
            _ = notify.notified() => { SELECT_NOTIFY_FIRED.fetch_add(1, Ordering::Relaxed); }
        }
    }
}

async fn select_notifier(notify: Arc<Notify>, seed: u64) {
    let mut rng = seed | 1;
    loop {
        tokio::time::sleep(Duration::from_micros(1000 + next_rand(&mut rng) % 3000)).await;
        notify.notify_waiters();
    }
}

// ---------------------------------------------------------------------------------------------
// server: read until Pending, then write and flush the replies
// ---------------------------------------------------------------------------------------------

struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
}

/// Reads what has arrived; the replies for complete requests are queued.
#[inline(never)]
fn conn_read_request(c: &mut Conn, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
    let mut buf = [0u8; 4096];
    let mut rb = ReadBuf::new(&mut buf);
    match Pin::new(&mut c.stream).poll_read(cx, &mut rb) {
        Poll::Ready(Ok(())) => {
            let n = rb.filled().len();
            c.inbuf.extend_from_slice(rb.filled());
            while let Some(pos) = c.inbuf.windows(4).position(|w| w == b"\r\n\r\n") {
                c.inbuf.drain(..pos + 4);
                c.out.extend_from_slice(REPLY);
                CONN_REQUESTS.fetch_add(1, Ordering::Relaxed);
            }
            Poll::Ready(Ok(n))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => {
            CONN_READ_PENDING.fetch_add(1, Ordering::Relaxed);
            Poll::Pending
        }
    }
}

/// Writes the queued replies and flushes.
#[inline(never)]
fn conn_flush_reply(c: &mut Conn, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
    while c.sent < c.out.len() {
        match Pin::new(&mut c.stream).poll_write(cx, &c.out[c.sent..]) {
            Poll::Ready(Ok(n)) => c.sent += n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {
                CONN_WRITE_PENDING.fetch_add(1, Ordering::Relaxed);
                return Poll::Pending;
            }
        }
    }
    c.out.clear();
    c.sent = 0;
    Pin::new(&mut c.stream).poll_flush(cx)
}

impl Future for Conn {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let c = self.get_mut();
        loop {
            match conn_read_request(c, cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => break,
            }
        }
        if let Poll::Ready(Err(_)) = conn_flush_reply(c, cx) {
            return Poll::Ready(());
        }
        CONN_POLLS_PENDING.fetch_add(1, Ordering::Relaxed);
        Poll::Pending
    }
}

#[inline(never)]
async fn conn_kind_task(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    Conn { stream, inbuf: Vec::new(), out: Vec::new(), sent: 0 }.await
}

async fn serve(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(conn_kind_task(stream));
    }
}

// ---------------------------------------------------------------------------------------------
// Options and main
// ---------------------------------------------------------------------------------------------

const USAGE: &str = "usage: dial9-parktruth --mode join|handle|select|server [--tasks N] [--workers N] \
[--duration S] [--port P]";

struct Opts {
    mode: String,
    tasks: u64,
    workers: usize,
    duration: u64,
    port: u16,
}

fn die(msg: &str) -> ! {
    eprintln!("dial9-parktruth: {}\n{}", msg, USAGE);
    std::process::exit(2);
}

fn parse_args() -> Opts {
    let mut o = Opts { mode: String::new(), tasks: 16, workers: 2, duration: 10, port: 0 };
    let mut args = std::env::args().skip(1);
    while let Some(name) = args.next() {
        let val = args.next().unwrap_or_else(|| die(&format!("{} needs a value", name)));
        let num = || val.parse::<u64>().unwrap_or_else(|_| die(&format!("bad value for {}", name)));
        match name.as_str() {
            "--mode" => o.mode = val.clone(),
            "--tasks" => o.tasks = num(),
            "--workers" => o.workers = num().max(1) as usize,
            "--duration" => o.duration = num(),
            "--port" => o.port = num() as u16,
            _ => die(&format!("unknown option: {}", name)),
        }
    }
    if !["join", "handle", "select", "server"].contains(&o.mode.as_str()) {
        die("--mode must be join, handle, select or server");
    }
    o
}

fn c(v: &AtomicU64) -> u64 {
    v.load(Ordering::Relaxed)
}

fn main() {
    // SAFETY: plain signal disposition changes before any thread exists.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    let o = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.workers)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&format!("cannot build runtime: {}", e)));
    let mut port = 0u16;
    rt.block_on(async {
        for i in 0..o.tasks {
            let seed = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1);
            match o.mode.as_str() {
                "join" => {
                    let (tx, rx) = mpsc::channel(1);
                    tokio::spawn(join_kind_task(rx, Arc::new(Semaphore::new(4))));
                    tokio::spawn(join_feeder(tx, seed));
                }
                "handle" => {
                    tokio::spawn(handle_kind_task(Arc::new(Semaphore::new(4)), seed));
                }
                "select" => {
                    let n = Arc::new(Notify::new());
                    tokio::spawn(select_kind_task(n.clone(), seed));
                    tokio::spawn(select_notifier(n, seed ^ 0x5555));
                }
                _ => {}
            }
        }
        if o.mode == "server" {
            let l = TcpListener::bind(("127.0.0.1", o.port))
                .await
                .unwrap_or_else(|e| die(&format!("cannot listen: {}", e)));
            port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            tokio::spawn(serve(l));
        }
    });
    emit(&format!(
        "{{\"type\":\"start\",\"pid\":{},\"mode\":\"{}\",\"port\":{}}}",
        std::process::id(),
        o.mode,
        port
    ));
    std::thread::sleep(Duration::from_secs(o.duration));
    emit(&format!(
        "{{\"type\":\"end\",\"join_rounds\":{},\"handle_rounds\":{},\"select_sleep_fired\":{},\"select_notify_fired\":{},\
\"conn_requests\":{},\"conn_read_pending\":{},\"conn_write_pending\":{},\"conn_polls_pending\":{}}}",
        c(&JOIN_ROUNDS),
        c(&HANDLE_ROUNDS),
        c(&SELECT_SLEEP_FIRED),
        c(&SELECT_NOTIFY_FIRED),
        c(&CONN_REQUESTS),
        c(&CONN_READ_PENDING),
        c(&CONN_WRITE_PENDING),
        c(&CONN_POLLS_PENDING)
    ));
    std::process::exit(0);
}
