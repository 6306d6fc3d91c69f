//! The offline fuzz campaign: `chad::internals::fuzz` inputs through the whole command line, in child
//! processes so that a crash, an abort or a hang is caught and recorded, not only a panic.
//!
//! ```text
//! cargo run --release --example fuzz_campaign -- --inputs 1000000 --jobs 2 --out fuzz-out
//! ```
//!
//! Options: `--seed S` (default 1), `--from K` (first input index, default 0), `--inputs N`,
//! `--jobs J` (child processes), `--out DIR` (findings and each worker's input file),
//! `--timeout SECS` (a hang: an input running longer, default 10), `--max-memory SIZE` (each
//! child's budget, default 2G). `--replay K` runs input K alone, in process, and prints each
//! command with its exit status and time.
//!
//! Each worker runs a contiguous range of input indices and prints the index of each input
//! before running it; the supervisor kills a worker that prints nothing for `--timeout`
//! seconds (a hang at that input), records a worker that dies before finishing its range (a
//! crash at the last input it started, with its exit status or signal), and restarts it after
//! that input. Panics are found in the worker (`chad::internals::fuzz::exercise` catches them) and
//! reported as lines. Every finding goes to `DIR/findings.txt` with its input index and text:
//! `chad::internals::fuzz::input(seed, index)` replays it. At the end the supervisor prints the totals and
//! exits 1 if anything was found.
//!
//! `CHAD_FUZZ_PLANT=abort:K` (or `hang:K`) makes the worker abort (or hang) at input K: a check
//! that the supervisor records both and carries on after them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// As the `chad` binary: the budget counts the heap, so `--max-memory` bounds it.
#[global_allocator]
static GLOBAL: chad::internals::budget::Counting<mimalloc::MiMalloc> =
    chad::internals::budget::Counting(mimalloc::MiMalloc);

struct Opts {
    seed: u64,
    from: u64,
    inputs: u64,
    jobs: u64,
    out: PathBuf,
    timeout: u64,
    max_memory: String,
    worker: bool,
    replay: Option<u64>,
}

fn opts() -> Opts {
    let mut o = Opts {
        seed: 1,
        from: 0,
        inputs: 10_000,
        jobs: 2,
        out: PathBuf::from("fuzz-out"),
        timeout: 10,
        max_memory: "2G".into(),
        worker: false,
        replay: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--seed" => o.seed = val().parse().expect("--seed N"),
            "--from" => o.from = val().parse().expect("--from K"),
            "--inputs" => o.inputs = val().parse().expect("--inputs N"),
            "--jobs" => o.jobs = val().parse().expect("--jobs J"),
            "--out" => o.out = PathBuf::from(val()),
            "--timeout" => o.timeout = val().parse().expect("--timeout SECS"),
            "--max-memory" => o.max_memory = val(),
            "--worker" => o.worker = true,
            "--replay" => o.replay = Some(val().parse().expect("--replay K")),
            _ => panic!("unknown option {a}"),
        }
    }
    o
}

/// A worker: runs inputs `from..from + inputs`, printing `start K` before input K, `panic K
/// ...` for each panic, `done` at the end.
fn worker(o: &Opts, file: &Path) {
    std::panic::set_hook(Box::new(|_| {}));
    chad::internals::budget::note_counting();
    let bytes = chad::internals::budget::parse_size(&o.max_memory).expect("--max-memory SIZE");
    chad::internals::budget::set_limit(bytes);
    let stdout = std::io::stdout();
    for k in o.from..o.from + o.inputs {
        let text = chad::internals::fuzz::input(o.seed, k);
        writeln!(stdout.lock(), "start {k}").unwrap();
        stdout.lock().flush().unwrap();
        // Planted failures, to see the supervisor catch them: CHAD_FUZZ_PLANT=abort:K,
        // hang:K or panic:K at input K.
        match std::env::var("CHAD_FUZZ_PLANT")
            .ok()
            .as_deref()
            .and_then(|p| p.split_once(':'))
        {
            Some(("abort", at)) if at == k.to_string() => std::process::abort(),
            Some(("hang", at)) if at == k.to_string() => loop {
                std::thread::sleep(Duration::from_secs(1))
            },
            _ => {}
        }
        let report = chad::internals::fuzz::exercise(&text, file, k);
        let mut line = format!("ran {k} {} {}", report.runs.len(), report.count(0));
        for f in report.findings {
            line.push_str(&format!(
                "\npanic {k} chad {} :: {}",
                f.command.join(" "),
                f.message.replace('\n', " ")
            ));
        }
        writeln!(stdout.lock(), "{line}").unwrap();
    }
    writeln!(stdout.lock(), "done").unwrap();
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    next: u64,
    end: u64,
    started: Option<u64>,
}

fn spawn(o: &Opts, k: usize, from: u64, end: u64) -> Running {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--worker",
            "--seed",
            &o.seed.to_string(),
            "--from",
            &from.to_string(),
            "--inputs",
            &(end - from).to_string(),
            "--max-memory",
            &o.max_memory,
            "--out",
            &o.out.join(format!("w{k}")).display().to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a worker");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Running {
        child,
        lines: rx,
        next: from,
        end,
        started: None,
    }
}

fn main() {
    let o = opts();
    if let Some(k) = o.replay {
        // One input, in process: its text, then each command with its status and time.
        chad::internals::budget::note_counting();
        chad::internals::budget::set_limit(
            chad::internals::budget::parse_size(&o.max_memory).expect("--max-memory"),
        );
        std::fs::create_dir_all(&o.out).unwrap();
        let text = chad::internals::fuzz::input(o.seed, k);
        println!("{text}\n---");
        let report = chad::internals::fuzz::exercise(&text, &o.out.join("replay.chad"), k);
        for ((args, outcome), s) in report.runs.iter().zip(&report.seconds) {
            let status = outcome
                .as_ref()
                .map_or("panic".to_string(), |o| o.status.to_string());
            println!("{s:8.3} s  exit {status}  chad {}", args.join(" "));
        }
        return;
    }
    if o.worker {
        std::fs::create_dir_all(&o.out).unwrap();
        return worker(&o, &o.out.join("input.chad"));
    }
    std::fs::create_dir_all(&o.out).unwrap();
    let mut findings = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(o.out.join("findings.txt"))
        .unwrap();
    let t0 = Instant::now();
    let per = o.inputs.div_ceil(o.jobs);
    let mut running: Vec<Option<Running>> = (0..o.jobs)
        .map(|k| {
            let from = o.from + k * per;
            let end = (from + per).min(o.from + o.inputs);
            (from < end).then(|| spawn(&o, k as usize, from, end))
        })
        .collect();
    let (mut ran, mut commands, mut ok, mut found) = (0u64, 0u64, 0u64, 0u64);
    let record = |what: &str, k: u64, findings: &mut std::fs::File| {
        let text = chad::internals::fuzz::input(o.seed, k);
        writeln!(
            findings,
            "=== {what} at input {k} (chad::internals::fuzz::input({}, {k}))\n{text}\n",
            o.seed
        )
        .unwrap();
        eprintln!("FOUND {what} at input {k}");
    };
    let mut last_report = Instant::now();
    let mut clock = Clock::default();
    while running.iter().any(Option::is_some) {
        for (w, slot) in running.iter_mut().enumerate() {
            let Some(r) = slot else { continue };
            let mut restart_from = None;
            match r.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let mut parts = line.splitn(5, ' ');
                    match parts.next() {
                        Some("start") => {
                            let k = parts.next().unwrap().parse().unwrap();
                            r.started = Some(k);
                            r.next = k + 1;
                        }
                        Some("ran") => {
                            ran += 1;
                            parts.next();
                            commands += parts.next().unwrap().parse::<u64>().unwrap();
                            ok += parts.next().unwrap().parse::<u64>().unwrap();
                            r.started = None;
                        }
                        Some("panic") => {
                            found += 1;
                            let k = parts.next().unwrap().parse().unwrap();
                            let rest: Vec<&str> = parts.collect();
                            record(&format!("panic ({})", rest.join(" ")), k, &mut findings);
                        }
                        Some("done") => {
                            let _ = r.child.wait();
                            *slot = None;
                            continue;
                        }
                        _ => {}
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The worker died before `done`: a crash at the input it had started.
                    let status = r.child.wait().ok();
                    if let Some(k) = r.started {
                        found += 1;
                        record(&format!("crash ({status:?})"), k, &mut findings);
                        restart_from = Some(k + 1);
                    } else {
                        restart_from = Some(r.next);
                    }
                }
            }
            if restart_from.is_none() {
                if let Some(k) = r.started {
                    // A hang: the same input for longer than the timeout.
                    if clock.tick(w, k) > Duration::from_secs(o.timeout) {
                        let _ = r.child.kill();
                        let _ = r.child.wait();
                        found += 1;
                        record("hang", k, &mut findings);
                        restart_from = Some(k + 1);
                    }
                }
            }
            if let Some(from) = restart_from {
                let end = r.end;
                *slot = (from < end).then(|| spawn(&o, w, from, end));
            }
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            last_report = Instant::now();
            eprintln!(
                "{ran} inputs, {commands} commands ({ok} succeeded), {found} findings, {:.0} s",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let summary = format!(
        "seed {}, inputs {}..{}: {ran} inputs ran, {commands} commands ({ok} succeeded), \
         {found} findings (crash, abort, hang over {} s, or panic), {:.0} s with {} jobs",
        o.seed,
        o.from,
        o.from + o.inputs,
        o.timeout,
        t0.elapsed().as_secs_f64(),
        o.jobs
    );
    println!("{summary}");
    writeln!(findings, "# {summary}").unwrap();
    if found > 0 {
        std::process::exit(1);
    }
}

/// When each worker started its current input (for the hang clock).
#[derive(Default)]
struct Clock(Vec<Option<(u64, Instant)>>);

impl Clock {
    /// How long worker `w` has been on input `k`.
    fn tick(&mut self, w: usize, k: u64) -> Duration {
        if self.0.len() <= w {
            self.0.resize(w + 1, None);
        }
        match self.0[w] {
            Some((j, t)) if j == k => t.elapsed(),
            _ => {
                self.0[w] = Some((k, Instant::now()));
                Duration::ZERO
            }
        }
    }
}
