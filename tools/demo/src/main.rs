//! dial9-demo: a Tokio program used as the profiling target of dial9-bpf's end-to-end tests.
//!
//! It runs four kinds of tasks, each an `async fn` with a recognisable name (`*_kind_*`), and
//! records ground truth: per kind and per CLOCK_MONOTONIC whole second, how many times tasks were
//! polled ("polls") and how many of those polls followed a poll that returned Pending
//! ("resumes"), plus the work units done. One JSON object per line goes to stdout; human
//! messages go to stderr.
//!
//! Must build with rustc 1.63 (Debian 12) and current stable, offline, from Debian's crates.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};

// ---------------------------------------------------------------------------------------------
// Ground-truth counters
// ---------------------------------------------------------------------------------------------

const KIND_CPU: usize = 0;
const KIND_TIMER: usize = 1;
const KIND_CHANNEL: usize = 2;
const KIND_BLOCKING: usize = 3;
const KIND_IDLE: usize = 4;
const NKINDS: usize = 5;
const KIND_NAMES: [&str; NKINDS] = ["cpu", "timer", "channel", "blocking", "idle"];

/// The async fns spawned, each a task type of its own in a profile: resumes are counted per
/// fn as well as per kind, so a type's estimate has its own truth (a kind sums several types
/// that resume at different rates, and an error in one can hide in the sum).
const FN_CPU: usize = 0;
const FN_LATE_CPU: usize = 1;
const FN_TIMER: usize = 2;
const FN_PRODUCER: usize = 3;
const FN_CONSUMER: usize = 4;
const FN_NOTIFIER: usize = 5;
const FN_NOTIFIED: usize = 6;
const FN_BLOCKING: usize = 7;
const FN_IDLE: usize = 8;
const NFNS: usize = 9;
const FN_NAMES: [&str; NFNS] = [
    "cpu_kind_task",
    "late_cpu_task",
    "timer_kind_task",
    "channel_kind_producer",
    "channel_kind_consumer",
    "channel_kind_notifier",
    "channel_kind_notified",
    "blocking_kind_task",
    "idle_kind_task",
];

/// Ring of one-second buckets, indexed by CLOCK_MONOTONIC whole second modulo RING.
const RING: usize = 4096;
/// Counters are sharded per thread so workers never write the same cache line.
const SHARDS: usize = 8;
const NS_PER_SEC: u64 = 1_000_000_000;
/// How long after a second ends before it is reported (lets in-flight increments land).
const GRACE_NS: u64 = 20_000_000;

#[repr(align(128))]
struct Bucket {
    resumes: [AtomicU64; NKINDS],
    polls: [AtomicU64; NKINDS],
    fn_resumes: [AtomicU64; NFNS],
    work: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_BUCKET: Bucket =
    Bucket { resumes: [ZERO; NKINDS], polls: [ZERO; NKINDS], fn_resumes: [ZERO; NFNS], work: ZERO };
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_RING: [Bucket; RING] = [EMPTY_BUCKET; RING];
static BUCKETS: [[Bucket; RING]; SHARDS] = [EMPTY_RING; SHARDS];

/// Resume times, when --trace-resumes asks for them: CLOCK_MONOTONIC ns << 4 | the fn's index,
/// appended without a lock and written out at the end. With them a reader can count the true
/// resumes inside any interval, such as a profiler's sampling windows.
static TRACE: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
static TRACE_LEN: AtomicUsize = AtomicUsize::new(0);
/// At most this many resumes are traced (64 MiB): some 30 s of the mix demo.
const TRACE_MAX: usize = 8 << 20;

/// The trace's slots, allocated once (and never freed) when --trace-resumes is given.
fn trace_slots() -> Option<&'static [AtomicU64]> {
    let p = TRACE.load(Ordering::Acquire);
    // SAFETY: set once by trace_start to a leaked allocation of TRACE_MAX slots.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, TRACE_MAX) })
}

fn trace_start() {
    let slots: Box<[AtomicU64]> = (0..TRACE_MAX).map(|_| AtomicU64::new(0)).collect();
    TRACE.store(Box::leak(slots).as_mut_ptr(), Ordering::Release);
}

#[inline]
fn trace_resume(func: usize) {
    if let Some(t) = trace_slots() {
        let i = TRACE_LEN.fetch_add(1, Ordering::Relaxed);
        if i < t.len() {
            t[i].store(mono_ns() << 4 | func as u64, Ordering::Relaxed);
        }
    }
}

fn write_trace(path: &str) {
    let t = match trace_slots() {
        Some(t) => t,
        None => return,
    };
    let n = TRACE_LEN.load(Ordering::Relaxed).min(t.len());
    let mut out = String::with_capacity(n * 32);
    for v in t.iter().take(n).map(|v| v.load(Ordering::Relaxed)) {
        out.push_str(&format!("{} {}\n", v >> 4, FN_NAMES[(v & 15) as usize]));
    }
    if let Err(e) = std::fs::write(path, out) {
        eprintln!("dial9-demo: failed to write {}: {}", path, e);
    }
}

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

#[inline]
fn bucket_now() -> &'static Bucket {
    let sec = (mono_ns() / NS_PER_SEC) as usize;
    let shard = SHARD.with(|s| *s);
    &BUCKETS[shard][sec % RING]
}

/// Counts work units (throughput) in the current second's bucket.
#[inline]
fn add_work(n: u64) {
    bucket_now().work.fetch_add(n, Ordering::Relaxed);
}

type PollFn<F> = fn(Pin<&mut F>, &mut Context<'_>) -> Poll<<F as Future>::Output>;

/// Wraps a spawned task's future and counts its polls and resumes for its kind.
///
/// The inner future is polled through a function pointer stored at construction: that keeps
/// the async fn's poll function (`dial9_demo::cpu_kind_task::{{closure}}` with current rustc) a
/// real, named function in the binary instead of being inlined into `Counted::poll`, so it
/// shows up as its own frame in profiler stacks.
struct Counted<F: Future> {
    inner: Pin<Box<F>>,
    poll_inner: PollFn<F>,
    kind: usize,
    func: usize,
    /// The previous poll returned Pending, so the next poll is a resume.
    was_pending: bool,
}

impl<F: Future> Counted<F> {
    fn new(kind: usize, func: usize, inner: F) -> Self {
        Counted { inner: Box::pin(inner), poll_inner: <F as Future>::poll, kind, func, was_pending: false }
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut(); // Counted is Unpin: the inner future is boxed.
        let b = bucket_now();
        b.polls[this.kind].fetch_add(1, Ordering::Relaxed);
        if this.was_pending {
            b.resumes[this.kind].fetch_add(1, Ordering::Relaxed);
            b.fn_resumes[this.func].fetch_add(1, Ordering::Relaxed);
            trace_resume(this.func);
        }
        let r = (this.poll_inner)(this.inner.as_mut(), cx);
        this.was_pending = r.is_pending();
        r
    }
}

fn spawn_counted<F>(kind: usize, func: usize, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(Counted::new(kind, func, fut));
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// Reporting state; the stdout lock is taken while holding it, so lines never interleave and
/// nothing is printed after the end line.
struct Reporter {
    next_sec: u64,
    work_reported: u64,
}

fn emit(line: &str) {
    let out = std::io::stdout();
    let mut out = out.lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn counts_json(names: &[&str], v: &[u64]) -> String {
    let mut s = String::from("{");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("\"{}\":{}", name, v[i]));
    }
    s.push('}');
    s
}

impl Reporter {
    /// Reports every second S whose end (plus `grace_ns`) is not after `now`.
    fn catch_up(&mut self, now: u64, grace_ns: u64) {
        while (self.next_sec + 1) * NS_PER_SEC + grace_ns <= now {
            let sec = self.next_sec;
            let slot = sec as usize % RING;
            let mut resumes = [0u64; NKINDS];
            let mut polls = [0u64; NKINDS];
            let mut fn_resumes = [0u64; NFNS];
            let mut work = 0u64;
            for shard in BUCKETS.iter() {
                let b = &shard[slot];
                for k in 0..NKINDS {
                    // swap: read and clear the slot for its reuse RING seconds later.
                    resumes[k] += b.resumes[k].swap(0, Ordering::Relaxed);
                    polls[k] += b.polls[k].swap(0, Ordering::Relaxed);
                }
                for (f, n) in fn_resumes.iter_mut().enumerate() {
                    *n += b.fn_resumes[f].swap(0, Ordering::Relaxed);
                }
                work += b.work.swap(0, Ordering::Relaxed);
            }
            self.work_reported += work;
            emit(&format!(
                "{{\"type\":\"second\",\"sec\":{},\"start_ns\":{},\"end_ns\":{},\"resumes\":{},\"polls\":{},\"fn_resumes\":{},\"work\":{}}}",
                sec,
                sec * NS_PER_SEC,
                (sec + 1) * NS_PER_SEC,
                counts_json(&KIND_NAMES, &resumes),
                counts_json(&KIND_NAMES, &polls),
                counts_json(&FN_NAMES, &fn_resumes),
                work
            ));
            self.next_sec += 1;
        }
    }

    /// Work counted but not yet reported (the current, incomplete second).
    fn unreported_work(&self) -> u64 {
        BUCKETS.iter().flat_map(|s| s.iter()).map(|b| b.work.load(Ordering::Relaxed)).sum()
    }
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

fn reporter_thread(rep: Arc<Mutex<Reporter>>, oncpu: bool) {
    loop {
        let target = (rep.lock().unwrap().next_sec + 1) * NS_PER_SEC + GRACE_NS;
        sleep_until_mono(target);
        let mut r = rep.lock().unwrap();
        r.catch_up(mono_ns(), GRACE_NS);
        if oncpu {
            // Cumulative: a reader takes the difference between two lines.
            emit(&format!(
                "{{\"type\":\"oncpu\",\"mono_ns\":{},\"heavy_ns\":{},\"light_ns\":{}}}",
                mono_ns(),
                ONCPU_NS[0].load(Ordering::Relaxed),
                ONCPU_NS[1].load(Ordering::Relaxed)
            ));
        }
    }
}

/// CPU time of the on-CPU kinds (heavy, light) inside their polls, from the thread's own CPU
/// clock: the ground truth of the profiler's on-CPU samples.
static ONCPU_NS: [AtomicU64; 2] = [ZERO, ZERO];

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; every thread has a CPU clock.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * NS_PER_SEC + ts.tv_nsec as u64
}

/// Wraps a task's future and adds the CPU time its polls take on their thread to ONCPU_NS.
struct CpuTimed<F: Future> {
    inner: Pin<Box<F>>,
    poll_inner: PollFn<F>,
    kind: usize,
}

impl<F: Future> Future for CpuTimed<F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let t0 = thread_cpu_ns();
        let r = (this.poll_inner)(this.inner.as_mut(), cx);
        ONCPU_NS[this.kind].fetch_add(thread_cpu_ns() - t0, Ordering::Relaxed);
        r
    }
}

fn spawn_cpu_timed<F>(kind: usize, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(CpuTimed { inner: Box::pin(fut), poll_inner: <F as Future>::poll, kind });
}

// ---------------------------------------------------------------------------------------------
// Work functions (never inlined so they are leaf frames with recognisable names)
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

#[inline(never)]
fn cpu_kind_work(seed: u64, iters: u32) -> u64 {
    spin_mix(seed | 1, iters).rotate_left(5)
}

#[inline(never)]
fn timer_kind_work(seed: u64) -> u64 {
    spin_mix(seed | 1, 2_000).rotate_left(7)
}

#[inline(never)]
fn channel_kind_work(v: u64) -> u64 {
    spin_mix(v | 1, 1_000).rotate_left(11)
}

#[inline(never)]
fn oncpu_heavy_work(seed: u64, iters: u32) -> u64 {
    spin_mix(seed | 1, iters.saturating_mul(3)).rotate_left(3)
}

#[inline(never)]
fn oncpu_light_work(seed: u64, iters: u32) -> u64 {
    spin_mix(seed | 1, iters).rotate_left(9)
}

/// Burns CPU for `ns` nanoseconds (called inside block_in_place).
#[inline(never)]
fn blocking_kind_work(seed: u64, ns: u64) -> u64 {
    let end = mono_ns() + ns;
    let mut x = seed | 1;
    let mut rounds = 0;
    while mono_ns() < end {
        x = spin_mix(x, 10_000);
        rounds += 1;
    }
    x.wrapping_add(rounds)
}

fn sink(v: u64) {
    SINK.fetch_xor(v, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------------------------

async fn cpu_kind_task(id: u64, iters: u32) {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut n: u64 = 0;
    loop {
        x = cpu_kind_work(x, iters);
        n += 1;
        add_work(1);
        if n % 4096 == 0 {
            sink(x);
        }
        tokio::task::yield_now().await;
    }
}

/// cpu_kind_task's work in a future of its own type, so that its polls go through their own
/// raw::poll instance: one that is never hit until these tasks start.
async fn late_cpu_task(id: u64, iters: u32) {
    let mut x = id.wrapping_mul(0x2545_f491_4f6c_dd1d);
    loop {
        x = cpu_kind_work(x, iters);
        add_work(1);
        sink(x);
        tokio::task::yield_now().await;
    }
}

/// Two CPU-bound kinds for the on-CPU samples: each poll does three units of work (heavy) or
/// one (light), then yields.
async fn oncpu_heavy_task(id: u64, iters: u32) {
    let mut x = id.wrapping_add(41);
    loop {
        x = oncpu_heavy_work(x, iters);
        sink(x);
        tokio::task::yield_now().await;
    }
}

/// Its future holds a Vec, so that its drop glue (and Harness::poll) is not merged with the
/// heavy kind's: without v0 mangling, task types are named from their drop glue.
async fn oncpu_light_task(id: u64, iters: u32) {
    let mut xs = vec![id.wrapping_add(43)];
    loop {
        xs[0] = oncpu_light_work(xs[0], iters);
        sink(xs[0]);
        tokio::task::yield_now().await;
    }
}

async fn timer_kind_task(id: u64) {
    let mut x = id.wrapping_add(17);
    let period = Duration::from_millis(2 + id % 4); // 2..5 ms
    loop {
        x = timer_kind_work(x);
        add_work(1);
        sink(x);
        tokio::time::sleep(period).await;
    }
}

/// A task that resumes about once a second, like an idle keep-alive connection: one is almost
/// never polled twice inside a profiler's short windows.
async fn idle_kind_task(id: u64) {
    let period = Duration::from_millis(900 + id % 200);
    loop {
        tokio::time::sleep(period).await;
        add_work(1);
    }
}

/// A timer-driven task whose future holds 8 KiB: spawned as it is (not through Counted, which
/// boxes), its task cell's trailer lies far beyond the id, as with the many real futures of
/// 4-16 KiB. No ground truth is kept for it.
async fn big_future_task(id: u64) {
    let mut pad = [0u8; 8192];
    let period = Duration::from_millis(2 + id % 4);
    loop {
        tokio::time::sleep(period).await;
        add_work(1);
        let i = (id as usize).wrapping_mul(7) % pad.len();
        // SAFETY: in bounds; volatile so the array lives in the future across the await.
        let v = unsafe { std::ptr::read_volatile(&pad[i]) };
        pad[i] = v.wrapping_add(1);
        sink(v as u64);
    }
}

/// Spins ~20 ms inside one poll, holding its worker: a long poll on the CPU.
#[inline(never)]
fn long_spin_work(seed: u64) -> u64 {
    let end = mono_ns() + 20_000_000;
    let mut x = seed | 1;
    while mono_ns() < end {
        x = spin_mix(x, 1_000);
    }
    x
}

/// Sleeps ~15 ms in a blocking call inside one poll: a long poll off the CPU.
#[inline(never)]
fn long_sleep_work(seed: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(15));
    spin_mix(seed | 1, 100)
}

/// One long poll every `period_ms`, each written as a ground-truth line: when it started and
/// ended on CLOCK_MONOTONIC and on which thread (the worker it held). Uncounted by kind.
async fn long_poll_task(kind: &'static str, period_ms: u64) {
    let mut x = period_ms;
    loop {
        tokio::time::sleep(Duration::from_millis(period_ms)).await;
        let start = mono_ns();
        x = if kind == "spin" { long_spin_work(x) } else { long_sleep_work(x) };
        let end = mono_ns();
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        emit(&format!(
            "{{\"type\":\"long_poll\",\"kind\":\"{}\",\"tid\":{},\"start_ns\":{},\"end_ns\":{}}}",
            kind, tid, start, end
        ));
        sink(x);
    }
}

async fn channel_kind_producer(id: u64, tx: mpsc::Sender<u64>, sem: Arc<Semaphore>) {
    let mut v = id;
    loop {
        let permit = match sem.acquire().await {
            Ok(p) => p,
            Err(_) => return,
        };
        for _ in 0..16 {
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
        acc ^= channel_kind_work(v);
        add_work(1);
        if v % 64 == 0 {
            sink(acc);
        }
    }
}

/// Wakes its waiter every millisecond through a Notify: event-driven, counted as channel.
async fn channel_kind_notifier(notify: Arc<Notify>) {
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        notify.notify_one();
    }
}

/// Parks in Notify: OwnedNotified (Tokio 1.47+) when built with the owned-notify feature,
/// Notified otherwise.
async fn channel_kind_notified(id: u64, notify: Arc<Notify>) {
    let mut x = id.wrapping_add(29);
    loop {
        #[cfg(feature = "owned-notify")]
        notify.clone().notified_owned().await;
        #[cfg(not(feature = "owned-notify"))]
        notify.notified().await;
        x = channel_kind_work(x);
        add_work(1);
        sink(x);
    }
}

async fn blocking_kind_task(id: u64) {
    let mut x = id + 3;
    loop {
        let start = mono_ns();
        x = tokio::task::block_in_place(|| blocking_kind_work(x, 200_000_000));
        // Ground truth for the handoff test: when this worker's thread was blocked.
        emit(&format!(
            "{{\"type\":\"blocking\",\"start_ns\":{},\"end_ns\":{}}}",
            start,
            mono_ns()
        ));
        add_work(1);
        sink(x);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Command line and main
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Mix,
    Hot,
}

struct Opts {
    workers: usize,
    duration: u64,
    cpu: Option<u64>,
    timer: Option<u64>,
    channel: Option<u64>,
    blocking: Option<u64>,
    notify: u64,
    cpu_iters: Option<u64>,
    late_cpu: u64,
    late_after: u64,
    idle: u64,
    big_future: u64,
    long_poll: u64,
    oncpu: u64,
    trace: Option<String>,
    mode: Mode,
}

const USAGE: &str = "usage: dial9-demo [--workers N (0: a current_thread runtime, no blocking tasks)] [--duration SECS (0 = until killed)] \
[--cpu-tasks N] [--timer-tasks N] [--channel-tasks PAIRS] [--blocking-tasks N] [--notify-tasks PAIRS] [--mode mix|hot] \
[--cpu-iters N (work per cpu task poll; default 20000 mix, 16 hot)] \
[--late-cpu-tasks N --late-after SECS (cpu tasks of another type, started SECS in)] \
[--idle-tasks N (each resumes about once a second)] [--big-future-tasks N (8 KiB futures, uncounted)] \
[--long-poll-tasks N (N tasks spinning 20 ms in a poll every 250 ms and N sleeping 15 ms in one \
every 400 ms, uncounted; each long poll written as a \"long_poll\" line)] \
[--oncpu-tasks N (N tasks doing 3 units of work a poll and N doing 1, uncounted; their CPU time \
inside polls written each second as an \"oncpu\" line)] \
[--trace-resumes FILE (every counted resume's time and async fn, written to FILE at the end of \
--duration)]";

fn die(msg: &str) -> ! {
    eprintln!("dial9-demo: {}\n{}", msg, USAGE);
    std::process::exit(2);
}

fn parse_args() -> Opts {
    let mut o = Opts {
        workers: 2,
        duration: 10,
        cpu: None,
        timer: None,
        channel: None,
        blocking: None,
        notify: 0,
        cpu_iters: None,
        late_cpu: 0,
        late_after: 5,
        idle: 0,
        big_future: 0,
        long_poll: 0,
        oncpu: 0,
        trace: None,
        mode: Mode::Mix,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline_val) = match arg.find('=') {
            Some(i) if arg.starts_with("--") => (arg[..i].to_string(), Some(arg[i + 1..].to_string())),
            _ => (arg.clone(), None),
        };
        if name == "-h" || name == "--help" {
            eprintln!("{}", USAGE);
            std::process::exit(0);
        }
        let val = match inline_val.or_else(|| args.next()) {
            Some(v) => v,
            None => die(&format!("{} needs a value", name)),
        };
        let num = || -> u64 {
            match val.parse::<u64>() {
                Ok(n) => n,
                Err(_) => die(&format!("bad value for {}: {}", name, val)),
            }
        };
        match name.as_str() {
            "--workers" => o.workers = num() as usize,
            "--duration" => o.duration = num(),
            "--cpu-tasks" => o.cpu = Some(num()),
            "--timer-tasks" => o.timer = Some(num()),
            "--channel-tasks" => o.channel = Some(num()),
            "--blocking-tasks" => o.blocking = Some(num()),
            "--notify-tasks" => o.notify = num(),
            "--cpu-iters" => o.cpu_iters = Some(num()),
            "--late-cpu-tasks" => o.late_cpu = num(),
            "--late-after" => o.late_after = num(),
            "--idle-tasks" => o.idle = num(),
            "--big-future-tasks" => o.big_future = num(),
            "--long-poll-tasks" => o.long_poll = num(),
            "--oncpu-tasks" => o.oncpu = num(),
            "--trace-resumes" => o.trace = Some(val.clone()),
            "--mode" => {
                o.mode = match val.as_str() {
                    "mix" => Mode::Mix,
                    "hot" => Mode::Hot,
                    _ => die(&format!("bad mode: {}", val)),
                }
            }
            _ => die(&format!("unknown option: {}", name)),
        }
    }
    o
}

fn main() {
    // Exit on SIGINT/SIGTERM even if the parent left them ignored (a non-interactive shell
    // ignores SIGINT for `cmd &`): default handling is all that is needed.
    // SAFETY: plain signal disposition changes before any thread exists.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    let o = parse_args();
    let hot = o.mode == Mode::Hot;
    // Defaults per mode. Hot: many tiny cpu tasks that yield after each bit of work so every
    // worker polls at a very high rate; no blocking tasks (block_in_place would steal a worker).
    let cpu = o.cpu.unwrap_or(if hot { 64 } else { 4 });
    let timer = o.timer.unwrap_or(8);
    let channel = o.channel.unwrap_or(if hot { 2 } else { 4 });
    // block_in_place panics on a current_thread runtime.
    let blocking = if o.workers == 0 { 0 } else { o.blocking.unwrap_or(if hot { 0 } else { 1 }) };
    let cpu_iters = o.cpu_iters.unwrap_or(if hot { 1_500 } else { 20_000 }).min(u32::MAX as u64) as u32;
    let oncpu = o.oncpu;

    // --workers 0: the tasks run on the thread that calls block_on, as under
    // #[tokio::main(flavor = "current_thread")].
    let mut builder = if o.workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(o.workers);
        b
    };
    let rt = builder
        .enable_time()
        .build()
        .unwrap_or_else(|e| die(&format!("cannot build runtime: {}", e)));

    let start = mono_ns();
    let rep = Arc::new(Mutex::new(Reporter { next_sec: start / NS_PER_SEC, work_reported: 0 }));
    emit(&format!(
        "{{\"type\":\"start\",\"pid\":{},\"workers\":{},\"mode\":\"{}\",\"mono_ns\":{}}}",
        std::process::id(),
        o.workers,
        if hot { "hot" } else { "mix" },
        start
    ));
    eprintln!(
        "dial9-demo: pid {} workers {} mode {} cpu {} timer {} channel-pairs {} blocking {} duration {}",
        std::process::id(),
        o.workers,
        if hot { "hot" } else { "mix" },
        cpu,
        timer,
        channel,
        blocking,
        o.duration
    );
    {
        let rep = rep.clone();
        std::thread::Builder::new()
            .name("dial9-reporter".into())
            .spawn(move || reporter_thread(rep, oncpu > 0))
            .expect("spawn reporter");
    }

    let duration = o.duration;
    let o_trace = o.trace.clone();
    if o_trace.is_some() {
        trace_start();
    }
    rt.block_on(async move {
        for i in 0..cpu {
            spawn_counted(KIND_CPU, FN_CPU, cpu_kind_task(i, cpu_iters));
        }
        for i in 0..timer {
            spawn_counted(KIND_TIMER, FN_TIMER, timer_kind_task(i));
        }
        let sem = Arc::new(Semaphore::new(std::cmp::max(1, channel as usize / 2)));
        for i in 0..channel {
            let (tx, rx) = mpsc::channel::<u64>(8);
            spawn_counted(KIND_CHANNEL, FN_PRODUCER, channel_kind_producer(i, tx, sem.clone()));
            spawn_counted(KIND_CHANNEL, FN_CONSUMER, channel_kind_consumer(rx));
        }
        for i in 0..blocking {
            spawn_counted(KIND_BLOCKING, FN_BLOCKING, blocking_kind_task(i));
        }
        for i in 0..o.idle {
            spawn_counted(KIND_IDLE, FN_IDLE, idle_kind_task(i));
        }
        for i in 0..o.big_future {
            tokio::spawn(big_future_task(i));
        }
        for i in 0..oncpu {
            spawn_cpu_timed(0, oncpu_heavy_task(i, cpu_iters));
            spawn_cpu_timed(1, oncpu_light_task(i, cpu_iters));
        }
        for _ in 0..o.long_poll {
            tokio::spawn(long_poll_task("spin", 250));
            tokio::spawn(long_poll_task("sleep", 400));
        }
        for i in 0..o.notify {
            let notify = Arc::new(Notify::new());
            spawn_counted(KIND_CHANNEL, FN_NOTIFIER, channel_kind_notifier(notify.clone()));
            spawn_counted(KIND_CHANNEL, FN_NOTIFIED, channel_kind_notified(i, notify));
        }
        let (late, late_after) = (o.late_cpu, o.late_after);
        if late > 0 {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(late_after)).await;
                for i in 0..late {
                    spawn_counted(KIND_CPU, FN_LATE_CPU, late_cpu_task(i, cpu_iters));
                }
            });
        }
        if duration > 0 {
            tokio::time::sleep(Duration::from_secs(duration)).await;
        } else {
            std::future::pending::<()>().await;
        }
    });

    // Report the seconds completed so far, then the end line, and exit while still holding the
    // reporter lock so nothing follows the end line.
    let mut r = rep.lock().unwrap();
    let now = mono_ns();
    r.catch_up(now, 0);
    let total = r.work_reported + r.unreported_work();
    emit(&format!("{{\"type\":\"end\",\"mono_ns\":{},\"work_total\":{}}}", now, total));
    eprintln!("dial9-demo: done, {} work units", total);
    if let Some(path) = &o_trace {
        write_trace(path);
    }
    std::process::exit(0);
}
