//! dial9-flavours: Tokio runtime flavours as profiling targets for dial9-bpf's end-to-end tests.
//!
//! `--flavour` picks how the tasks run:
//! - `current`: what `#[tokio::main(flavor = "current_thread")]` expands to (that attribute is
//!   used): a current_thread runtime whose `block_on` runs on the main thread;
//! - `two`: a multi-thread runtime (`--workers`) and a current_thread runtime on a thread of
//!   its own ("ct-runtime"), each with its own tasks, in one process;
//! - `local`: a `LocalSet` on a current_thread runtime, its tasks spawned with `spawn_local`;
//! - `blocking`: a multi-thread runtime whose "waiter" tasks await `spawn_blocking` work;
//! - `mt`: the same mix on a multi-thread runtime alone (no waiters unless asked), to compare.
//!
//! Ground truth as in tools/demo (one JSON object per line on stdout): per kind and per
//! CLOCK_MONOTONIC whole second, polls and resumes (polls after a Pending one) of the async
//! tasks, in total ("resumes", "polls") and per runtime ("rt_resumes"), and the spawn_blocking
//! closures run ("blocking_runs"). "thread" lines give the tid of each runtime's threads.
//!
//! Must build with rustc 1.63 (Debian 12) and current stable, offline, from Debian's crates.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

const KIND_CPU: usize = 0;
const KIND_TIMER: usize = 1;
const KIND_CHANNEL: usize = 2;
const KIND_WAITER: usize = 3;
const NKINDS: usize = 4;
const KIND_NAMES: [&str; NKINDS] = ["cpu", "timer", "channel", "waiter"];

/// Runtimes whose tasks are counted apart: "mt" (multi-thread) and "ct" (current_thread).
const RT_MT: usize = 0;
const RT_CT: usize = 1;
const NRTS: usize = 2;
const RT_NAMES: [&str; NRTS] = ["mt", "ct"];

/// Ring of one-second buckets, indexed by CLOCK_MONOTONIC whole second modulo RING.
const RING: usize = 1024;
/// Counters are sharded per thread so threads rarely write the same cache line.
const SHARDS: usize = 8;
const NS_PER_SEC: u64 = 1_000_000_000;
/// How long after a second ends before it is reported (lets in-flight increments land).
const GRACE_NS: u64 = 20_000_000;

#[repr(align(128))]
struct Bucket {
    resumes: [[AtomicU64; NKINDS]; NRTS],
    polls: [[AtomicU64; NKINDS]; NRTS],
    blocking_runs: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_KINDS: [AtomicU64; NKINDS] = [ZERO; NKINDS];
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_BUCKET: Bucket =
    Bucket { resumes: [ZERO_KINDS; NRTS], polls: [ZERO_KINDS; NRTS], blocking_runs: ZERO };
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_RING: [Bucket; RING] = [EMPTY_BUCKET; RING];
static BUCKETS: [[Bucket; RING]; SHARDS] = [EMPTY_RING; SHARDS];

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

/// Sink for results of work functions so the optimiser cannot drop the work.
static SINK: AtomicU64 = AtomicU64::new(0);

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * NS_PER_SEC + ts.tv_nsec as u64
}

fn gettid() -> i64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

#[inline]
fn bucket_now() -> &'static Bucket {
    let sec = (mono_ns() / NS_PER_SEC) as usize;
    let shard = SHARD.with(|s| *s);
    &BUCKETS[shard][sec % RING]
}

type PollFn<F> = fn(Pin<&mut F>, &mut Context<'_>) -> Poll<<F as Future>::Output>;

/// Wraps a task's future and counts its polls and resumes for its runtime and kind. The inner
/// future is polled through a function pointer so that the async fn's poll function stays a
/// named frame of its own (as in tools/demo).
struct Counted<F: Future> {
    inner: Pin<Box<F>>,
    poll_inner: PollFn<F>,
    rt: usize,
    kind: usize,
    was_pending: bool,
}

impl<F: Future> Counted<F> {
    fn new(rt: usize, kind: usize, inner: F) -> Self {
        Counted { inner: Box::pin(inner), poll_inner: <F as Future>::poll, rt, kind, was_pending: false }
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut(); // Counted is Unpin: the inner future is boxed.
        let b = bucket_now();
        b.polls[this.rt][this.kind].fetch_add(1, Ordering::Relaxed);
        if this.was_pending {
            b.resumes[this.rt][this.kind].fetch_add(1, Ordering::Relaxed);
        }
        let r = (this.poll_inner)(this.inner.as_mut(), cx);
        this.was_pending = r.is_pending();
        r
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

fn emit(line: &str) {
    let out = std::io::stdout();
    let mut out = out.lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn kinds_json(v: &[u64; NKINDS]) -> String {
    let parts: Vec<String> =
        KIND_NAMES.iter().zip(v.iter()).map(|(n, c)| format!("\"{}\":{}", n, c)).collect();
    format!("{{{}}}", parts.join(","))
}

fn emit_thread(rt: usize) {
    emit(&format!("{{\"type\":\"thread\",\"runtime\":\"{}\",\"tid\":{}}}", RT_NAMES[rt], gettid()));
}

/// Reads and clears the bucket of second `sec` in every shard, and reports it.
fn report_second(sec: u64) {
    let slot = sec as usize % RING;
    let mut resumes = [[0u64; NKINDS]; NRTS];
    let mut polls = [[0u64; NKINDS]; NRTS];
    let mut blocking = 0u64;
    for shard in BUCKETS.iter() {
        let b = &shard[slot];
        for r in 0..NRTS {
            for k in 0..NKINDS {
                resumes[r][k] += b.resumes[r][k].swap(0, Ordering::Relaxed);
                polls[r][k] += b.polls[r][k].swap(0, Ordering::Relaxed);
            }
        }
        blocking += b.blocking_runs.swap(0, Ordering::Relaxed);
    }
    let mut total_resumes = [0u64; NKINDS];
    let mut total_polls = [0u64; NKINDS];
    for k in 0..NKINDS {
        total_resumes[k] = resumes[RT_MT][k] + resumes[RT_CT][k];
        total_polls[k] = polls[RT_MT][k] + polls[RT_CT][k];
    }
    emit(&format!(
        "{{\"type\":\"second\",\"sec\":{},\"start_ns\":{},\"end_ns\":{},\"resumes\":{},\"polls\":{},\
         \"rt_resumes\":{{\"mt\":{},\"ct\":{}}},\"blocking_runs\":{}}}",
        sec,
        sec * NS_PER_SEC,
        (sec + 1) * NS_PER_SEC,
        kinds_json(&total_resumes),
        kinds_json(&total_polls),
        kinds_json(&resumes[RT_MT]),
        kinds_json(&resumes[RT_CT]),
        blocking
    ));
}

fn sleep_until_mono(t_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (t_ns / NS_PER_SEC) as libc::time_t,
        tv_nsec: (t_ns % NS_PER_SEC) as libc::c_long,
    };
    // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    while unsafe {
        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
    } == libc::EINTR
    {}
}

/// Reports each second once it is over; the lock keeps the end line last.
fn reporter_thread(next: Arc<Mutex<u64>>) {
    loop {
        let target = (*next.lock().unwrap() + 1) * NS_PER_SEC + GRACE_NS;
        sleep_until_mono(target);
        let mut n = next.lock().unwrap();
        while (*n + 1) * NS_PER_SEC + GRACE_NS <= mono_ns() {
            report_second(*n);
            *n += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Work and tasks (never inlined, so they are frames with recognisable names)
// ---------------------------------------------------------------------------------------------

#[inline(never)]
fn spin_mix(mut x: u64, iters: u32) -> u64 {
    for i in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(i as u64);
    }
    x
}

fn sink(v: u64) {
    SINK.fetch_xor(v, Ordering::Relaxed);
}

/// The spawn_blocking closure's work: ~`ns` of CPU.
#[inline(never)]
fn blocking_pool_work(seed: u64, ns: u64) -> u64 {
    let end = mono_ns() + ns;
    let mut x = seed | 1;
    while mono_ns() < end {
        x = spin_mix(x, 2_000);
    }
    x
}

async fn cpu_kind_task(id: u64, iters: u32) {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    loop {
        x = spin_mix(x | 1, iters);
        sink(x);
        tokio::task::yield_now().await;
    }
}

async fn timer_kind_task(id: u64) {
    let mut x = id.wrapping_add(17);
    let period = Duration::from_millis(2 + id % 4); // 2..5 ms
    loop {
        x = spin_mix(x | 1, 2_000);
        sink(x);
        tokio::time::sleep(period).await;
    }
}

async fn channel_kind_producer(id: u64, tx: mpsc::Sender<u64>, sem: Arc<Semaphore>) {
    let mut v = id;
    loop {
        let permit = match sem.acquire().await {
            Ok(p) => p,
            Err(_) => return,
        };
        // Short batches from several producers: windows are a few ms, and long bursts make
        // what one catches swing widely.
        for _ in 0..4 {
            v = v.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if tx.send(v).await.is_err() {
                return;
            }
        }
        drop(permit);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn channel_kind_consumer(mut rx: mpsc::Receiver<u64>) {
    let mut acc = 0u64;
    while let Some(v) = rx.recv().await {
        acc ^= spin_mix(v | 1, 1_000);
        if v % 64 == 0 {
            sink(acc);
        }
    }
}

/// Awaits spawn_blocking work: its resumes are async ones; the closures it runs are not.
async fn waiter_kind_task(id: u64) {
    let mut x = id + 5;
    loop {
        x = tokio::task::spawn_blocking(move || {
            let r = blocking_pool_work(x, 200_000);
            bucket_now().blocking_runs.fetch_add(1, Ordering::Relaxed);
            r
        })
        .await
        .unwrap_or(x);
        sink(x);
        // Light on the pool: its threads compete with the workers for the same cores.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[derive(Clone, Copy)]
struct Mix {
    cpu: u64,
    timer: u64,
    channel: u64,
    waiter: u64,
    cpu_iters: u32,
}

/// Spawns `mix` on the current runtime, or on the current LocalSet with `local`.
fn spawn_mix(rt: usize, mix: Mix, local: bool) {
    fn go<F: Future<Output = ()> + Send + 'static>(rt: usize, kind: usize, local: bool, f: F) {
        if local {
            tokio::task::spawn_local(Counted::new(rt, kind, f));
        } else {
            tokio::spawn(Counted::new(rt, kind, f));
        }
    }
    for i in 0..mix.cpu {
        go(rt, KIND_CPU, local, cpu_kind_task(i, mix.cpu_iters));
    }
    for i in 0..mix.timer {
        go(rt, KIND_TIMER, local, timer_kind_task(i));
    }
    let sem = Arc::new(Semaphore::new(std::cmp::max(1, mix.channel as usize / 2)));
    for i in 0..mix.channel {
        let (tx, rx) = mpsc::channel::<u64>(8);
        go(rt, KIND_CHANNEL, local, channel_kind_producer(i, tx, sem.clone()));
        go(rt, KIND_CHANNEL, local, channel_kind_consumer(rx));
    }
    for i in 0..mix.waiter {
        go(rt, KIND_WAITER, local, waiter_kind_task(i));
    }
}

async fn run_for(duration: u64) {
    if duration > 0 {
        tokio::time::sleep(Duration::from_secs(duration)).await;
    } else {
        std::future::pending::<()>().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Flavours
// ---------------------------------------------------------------------------------------------

#[tokio::main(flavor = "current_thread")]
async fn current_main(mix: Mix, duration: u64) {
    emit_thread(RT_CT);
    spawn_mix(RT_CT, mix, false);
    run_for(duration).await;
}

fn local_main(mix: Mix, duration: u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    emit_thread(RT_CT);
    local.block_on(&rt, async move {
        spawn_mix(RT_CT, mix, true);
        run_for(duration).await;
    });
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .on_thread_start(|| emit_thread(RT_MT))
        .build()
        .expect("runtime")
}

fn two_main(mix: Mix, workers: usize, duration: u64) {
    let ct_mix = mix;
    std::thread::Builder::new()
        .name("ct-runtime".into())
        .spawn(move || current_main(ct_mix, duration))
        .expect("spawn ct-runtime");
    multi_thread(workers).block_on(async move {
        spawn_mix(RT_MT, mix, false);
        run_for(duration).await;
    });
}

fn blocking_main(mix: Mix, workers: usize, duration: u64) {
    multi_thread(workers).block_on(async move {
        spawn_mix(RT_MT, mix, false);
        run_for(duration).await;
    });
}

// ---------------------------------------------------------------------------------------------
// Command line and main
// ---------------------------------------------------------------------------------------------

const USAGE: &str = "usage: dial9-flavours --flavour|--mode current|two|local|blocking|mt [--workers N] \
[--duration SECS (0 = until killed)] [--cpu-tasks N] [--timer-tasks N] [--channel-tasks PAIRS] \
[--waiter-tasks N] [--cpu-iters N]";

fn die(msg: &str) -> ! {
    eprintln!("dial9-flavours: {}\n{}", msg, USAGE);
    std::process::exit(2);
}

struct Opts {
    flavour: String,
    workers: usize,
    duration: u64,
    mix: Mix,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        flavour: String::new(),
        workers: 2,
        duration: 10,
        mix: Mix { cpu: 2, timer: 8, channel: 4, waiter: 0, cpu_iters: 20_000 },
    };
    let mut args = std::env::args().skip(1);
    while let Some(name) = args.next() {
        let val = args.next().unwrap_or_else(|| die(&format!("{} needs a value", name)));
        let num = || val.parse::<u64>().unwrap_or_else(|_| die(&format!("bad value for {}", name)));
        match name.as_str() {
            // --mode as well: tests/e2e/harness.py's Demo passes the mode that way.
            "--flavour" | "--mode" => o.flavour = val.clone(),
            "--workers" => o.workers = num().max(1) as usize,
            "--duration" => o.duration = num(),
            "--cpu-tasks" => o.mix.cpu = num(),
            "--timer-tasks" => o.mix.timer = num(),
            "--channel-tasks" => o.mix.channel = num(),
            "--waiter-tasks" => o.mix.waiter = num(),
            "--cpu-iters" => o.mix.cpu_iters = num().min(u32::MAX as u64) as u32,
            _ => die(&format!("unknown option: {}", name)),
        }
    }
    o
}

fn main() {
    // SAFETY: plain signal disposition changes before any thread exists.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    let mut o = parse_args();
    if o.flavour == "blocking" && o.mix.waiter == 0 {
        o.mix.waiter = 4;
    }
    let start = mono_ns();
    let next = Arc::new(Mutex::new(start / NS_PER_SEC));
    emit(&format!(
        "{{\"type\":\"start\",\"pid\":{},\"flavour\":\"{}\",\"workers\":{},\"mono_ns\":{}}}",
        std::process::id(),
        o.flavour,
        o.workers,
        start
    ));
    {
        let next = next.clone();
        std::thread::Builder::new()
            .name("d9-reporter".into())
            .spawn(move || reporter_thread(next))
            .expect("spawn reporter");
    }
    match o.flavour.as_str() {
        "current" => current_main(o.mix, o.duration),
        "two" => two_main(o.mix, o.workers, o.duration),
        "local" => local_main(o.mix, o.duration),
        "blocking" | "mt" => blocking_main(o.mix, o.workers, o.duration),
        _ => die("--flavour is current, two, local, blocking or mt"),
    }
    // Held while the end line is written: no second is reported after it.
    let _n = next.lock().unwrap();
    emit(&format!("{{\"type\":\"end\",\"mono_ns\":{}}}", mono_ns()));
    std::process::exit(0);
}
