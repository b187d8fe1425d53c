//! The fuzz runner (`cargo run --release --example fuzz -- --help`): runs each target of
//! `targets.rs` for a time budget on arbtest seeds, prints executions per target and per second,
//! and for each crash the seed that reproduces it. Runs on the stable toolchain.
//!
//! A seed is arbtest's (input size in the low 32 bits, randomness in the high ones), so a crash
//! found here is replayed with `--seed` and shrunk with `--minimize`, and a fixed one becomes a
//! regression seed in `tests/properties.rs`.

#[path = "invariants.rs"]
mod invariants;
#[path = "targets.rs"]
mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use targets::{Target, TARGETS};

const USAGE: &str = "\
usage: fuzz [--target NAME[,NAME...]] [--seconds N] [--seed SEED [--minimize]] [--list]

  --target NAME   run only these targets (repeatable, or comma-separated)
  --seconds N     time budget per target, seconds (default 10; fractions allowed)
  --seed SEED     run one execution with this arbtest seed (hex, as printed on a crash)
  --minimize      with --seed: shrink the failing input for the budget and print the seed
  --list          list the targets and exit";

/// Parsed command line.
struct Args {
    targets: Vec<&'static Target>,
    budget: Duration,
    seed: Option<u64>,
    minimize: bool,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut names: Vec<String> = Vec::new();
    let mut budget = Duration::from_secs(10);
    let mut seed = None;
    let mut minimize = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--target" => names.extend(value("a name")?.split(',').map(str::to_owned)),
            "--seconds" => {
                let s: f64 = value("a number")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?;
                budget = Duration::try_from_secs_f64(s).map_err(|e| format!("--seconds: {e}"))?;
            }
            "--seed" => {
                let v = value("a seed")?;
                let hex = v.trim_start_matches("0x");
                seed = Some(u64::from_str_radix(hex, 16).map_err(|e| format!("--seed: {e}"))?);
            }
            "--minimize" => minimize = true,
            "--list" => {
                for t in TARGETS {
                    println!("{:<22} up to {} input bytes", t.name, t.max_input);
                }
                return Ok(None);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let targets = if names.is_empty() {
        TARGETS.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                TARGETS
                    .iter()
                    .find(|t| t.name == n)
                    .ok_or(format!("no target {n:?} (see --list)"))
            })
            .collect::<Result<_, _>>()?
    };
    if minimize && seed.is_none() {
        return Err("--minimize needs --seed".into());
    }
    Ok(Some(Args {
        targets,
        budget,
        seed,
        minimize,
    }))
}

/// One execution of `target` on `seed`, as arbtest replays it. Errors from running out of
/// random bytes are not failures: the input is just shorter.
fn run_one(target: &Target, seed: u64) {
    arbtest::arbtest(|u| {
        let _ = (target.run)(u);
        Ok(())
    })
    .seed(seed)
    .run();
}

/// xorshift64*: picks the seeds.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An arbtest seed whose input size is at most `max`, small sizes as likely as large
    /// ones on a log scale (short inputs find the simple bugs, long ones the deep states).
    fn seed(&mut self, max: u32) -> u64 {
        let bits = self.below(u64::from(max.max(1).ilog2()) + 2);
        let size = self.below((1u64 << bits).min(u64::from(max)) + 1);
        size | (self.next() << 32)
    }
}

/// What one target did.
struct Outcome {
    execs: u64,
    elapsed: Duration,
    crash: Option<u64>,
}

fn fuzz(target: &Target, budget: Duration, rng: &mut Rng) -> Outcome {
    let start = Instant::now();
    let mut execs = 0;
    while start.elapsed() < budget {
        let seed = rng.seed(target.max_input);
        execs += 1;
        // arbtest prints the seed, the panic hook the message; stop this target at its first
        // crash so one bug does not flood the output, and go on with the others.
        if catch_unwind(AssertUnwindSafe(|| run_one(target, seed))).is_err() {
            return Outcome {
                execs,
                elapsed: start.elapsed(),
                crash: Some(seed),
            };
        }
    }
    Outcome {
        execs,
        elapsed: start.elapsed(),
        crash: None,
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = args.seed {
        for t in &args.targets {
            println!("{}: seed {seed:#018x}", t.name);
            if args.minimize {
                arbtest::arbtest(|u| {
                    let _ = (t.run)(u);
                    Ok(())
                })
                .seed(seed)
                .minimize()
                .budget(args.budget)
                .run();
            } else {
                run_one(t, seed);
                println!("{}: passed", t.name);
            }
        }
        return ExitCode::SUCCESS;
    }

    // One line per crash (message and place), not a backtrace per execution.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut rng = Rng(nanos | 1);
    println!(
        "fuzzing {} targets for {:?} each",
        args.targets.len(),
        args.budget
    );
    let mut crashes = Vec::new();
    let mut total = 0;
    for t in &args.targets {
        let o = fuzz(t, args.budget, &mut rng);
        let rate = o.execs as f64 / o.elapsed.as_secs_f64().max(1e-9);
        println!(
            "{:<22} {:>12} execs {:>8.1} s {:>12.0} execs/s{}",
            t.name,
            o.execs,
            o.elapsed.as_secs_f64(),
            rate,
            o.crash
                .map_or(String::new(), |s| format!("  CRASH seed {s:#018x}"))
        );
        total += o.execs;
        if let Some(seed) = o.crash {
            crashes.push((t.name, seed));
        }
    }
    for (name, seed) in &crashes {
        println!(
            "reproduce: cargo run --release --example fuzz -- --target {name} --seed {seed:#018x}"
        );
    }
    println!(
        "fuzz: {} targets, {total} executions, {} crashes",
        args.targets.len(),
        crashes.len()
    );
    if crashes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
