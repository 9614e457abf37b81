//! The three README jobs, scaled down, resume exactly: a run stopped after
//! step k (`--stop-after k`) and continued with `--resume` prints the same
//! losses and ends with the same parameters and optimizer state, bit for
//! bit, as the run that was never stopped. k is taken inside an epoch, at
//! an epoch's last step and at the run's last step, plus seeded random
//! steps (printed). `train_digits` is also stopped by a real SIGTERM at a
//! seeded random moment, and stopped twice in one run. The CNN and the
//! GPT resume exactly with `--compile` too.
//!
//! The tests run the example binaries `cargo test` builds next to this
//! test (`target/<profile>/examples/`). Run alone, build them first
//! (`cargo build --examples`), or each test prints a `skipped:` line.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::io::{load_tensors, TensorFile};

/// The example binary `name`, if it was built.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join(name);
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {name} is not built (run `cargo build --examples`, or the whole `cargo test`)");
        None
    }
}

/// One job and the flags of its scaled-down run.
struct Job {
    name: &'static str,
    bin: PathBuf,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Job {
    fn new(name: &'static str, args: &[&str]) -> Option<Job> {
        Some(Job {
            name,
            bin: example(name)?,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// Runs the job with its flags, `--out` and `--checkpoint-dir` in the
    /// scratch directory under `tag`, and `extra`; it must exit 0.
    fn run(&self, tag: &str, extra: &[String]) -> String {
        let out = self.command(tag, extra).output().unwrap();
        self.check(&out, extra);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn command(&self, tag: &str, extra: &[String]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(&self.args)
            .arg("--out")
            .arg(self.out(tag))
            .arg("--checkpoint-dir")
            .arg(self.checkpoints(tag))
            .args(extra);
        c
    }

    fn check(&self, out: &Output, extra: &[String]) {
        assert!(
            out.status.success(),
            "{} {extra:?} failed ({}):\n{}\n{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn out(&self, tag: &str) -> PathBuf {
        self.dir.path().join(format!("{tag}.safetensors"))
    }

    fn checkpoints(&self, tag: &str) -> PathBuf {
        self.dir.path().join(format!("{tag}.checkpoints"))
    }

    /// The newest training state of run `tag`.
    fn newest_state(&self, tag: &str) -> PathBuf {
        let mut states: Vec<PathBuf> = std::fs::read_dir(self.checkpoints(tag))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        states.sort();
        states.pop().expect("a training state")
    }
}

fn flags(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What the two runs must print alike: the epoch table's rows without the
/// elapsed time, the final accuracy, the reload check; `train_shakespeare`'s
/// loss estimates without the file saved.
fn printed_losses(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').collect();
            if cells.len() == 6 && cells[0].trim().parse::<u32>().is_ok() {
                return Some(cells[..5].join("|"));
            }
            if line.starts_with("step ") && line.contains("val loss") {
                return Some(line.split("  (saved").next().unwrap_or(line).to_string());
            }
            (line.starts_with("final test accuracy") || line.starts_with("reloaded"))
                .then(|| line.split(" (").next().unwrap_or(line).to_string())
        })
        .collect()
}

/// A file's tensors (as bits) and metadata, without what may differ
/// between equal runs: the checksum over it all, where the file was
/// written, and the training time.
/// Named tensors as bits, and named metadata.
type Content = (Vec<(String, Vec<u64>)>, Vec<(String, String)>);

fn content(path: &Path) -> Content {
    let TensorFile { tensors, metadata } = load_tensors(path).unwrap();
    let tensors = tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                t.to_f64_vec().iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect();
    let metadata = metadata
        .into_iter()
        .filter(|(k, _)| k != "checksum" && !k.ends_with("value.train_time"))
        .collect();
    (tensors, metadata)
}

/// Steps k to stop after: `fixed` ones and `random` more in `1..total`
/// drawn from a seed, printed.
fn stops(job: &str, fixed: &[u64], random: usize, total: u64, seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ks = fixed.to_vec();
    while ks.len() < fixed.len() + random {
        let k = rng.random_range(1..total);
        if !ks.contains(&k) {
            ks.push(k);
        }
    }
    println!("{job}: stopping after steps {ks:?} (seed {seed}) of {total}");
    ks
}

/// Runs `job` straight through, then stopped after each k and resumed:
/// the same losses, the same final file. `finished` names the file that
/// holds the end of a run: its `--out` checkpoint, or (for a job stopped
/// at its last step by its own flags) its newest training state.
fn resumes_exactly(job: &Job, ks: &[u64], end_state: bool) {
    let final_file = |tag: &str| {
        if end_state {
            job.newest_state(tag)
        } else {
            job.out(tag)
        }
    };
    let straight = job.run("straight", &[]);
    let want = printed_losses(&straight);
    assert!(
        !want.is_empty(),
        "{}: no losses printed:\n{straight}",
        job.name
    );
    let want_file = content(&final_file("straight"));
    for &k in ks {
        let tag = format!("k{k}");
        let first = job.run(&tag, &flags(&["--stop-after", &k.to_string()]));
        assert!(
            first.contains(&format!(
                "stopped as asked (--stop-after {k}) after step {k}"
            )),
            "{first}"
        );
        let second = job.run(&tag, &flags(&["--resume"]));
        assert!(second.contains("resuming from "), "{second}");
        let mut got = printed_losses(&first);
        got.extend(printed_losses(&second));
        assert_eq!(got, want, "{}: losses after stopping at step {k}", job.name);
        assert!(
            content(&final_file(&tag)) == want_file,
            "{}: the run stopped at step {k} ends with other parameters, optimizer state or counters",
            job.name
        );
    }
}

#[test]
fn train_digits_resumes_exactly() {
    // 1438 training images in batches of 32: 45 steps an epoch, 135 in all.
    let Some(job) = Job::new(
        "train_digits",
        &[
            "--epochs",
            "3",
            "--hidden",
            "16",
            "--dropout",
            "0.1",
            "--quiet",
        ],
    ) else {
        return;
    };
    let ks = stops("train_digits", &[1, 45, 100, 135], 1, 135, 34);
    resumes_exactly(&job, &ks, false);

    // Stopped twice: after 30 and 70 steps.
    let first = job.run("twice", &flags(&["--stop-after", "30"]));
    let second = job.run("twice", &flags(&["--resume", "--stop-after", "70"]));
    let third = job.run("twice", &flags(&["--resume"]));
    let mut got = printed_losses(&first);
    got.extend(printed_losses(&second));
    got.extend(printed_losses(&third));
    assert_eq!(got, printed_losses(&job.run("straight", &[])));
    assert!(content(&job.out("twice")) == content(&job.out("straight")));

    // `--resume FILE` names the state; `--resume` in an empty directory starts afresh.
    let state = job.newest_state("k45");
    let named = job.run(
        "named",
        &[String::from("--resume"), state.display().to_string()],
    );
    assert!(
        named.contains("resuming from") && named.contains("step 45"),
        "{named}"
    );
    assert!(content(&job.out("named")) == content(&job.out("straight")));
    let fresh = job.run("fresh", &flags(&["--resume"]));
    assert!(fresh.contains("no training state in"), "{fresh}");
}

#[test]
fn train_digits_resumes_after_sigterm() {
    let Some(job) = Job::new(
        "train_digits",
        &[
            "--epochs",
            "12",
            "--hidden",
            "16",
            "--dropout",
            "0.1",
            "--quiet",
        ],
    ) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let delay = Duration::from_millis(rng.random_range(20..400));
    let mut child = job
        .command("signal", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The handlers are in place once the table's header is printed.
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("epoch |") {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        printed.push_str(&line);
    }
    std::thread::sleep(delay);
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    printed.push_str(&rest);
    let status = child.wait().unwrap();
    println!(
        "train_digits: SIGTERM {} ms after training began",
        delay.as_millis()
    );
    if status.success() {
        // The run ended before the signal came: nothing to resume.
        println!("skipped: the run finished before the signal (machine faster than expected)");
        return;
    }
    assert_eq!(status.code(), Some(143), "{printed}");
    assert!(
        printed.contains("received SIGTERM: stopped after step"),
        "{printed}"
    );
    let resumed = job.run("signal", &flags(&["--resume"]));
    let mut got = printed_losses(&printed);
    got.extend(printed_losses(&resumed));
    let straight = job.run("straight", &[]);
    assert_eq!(got, printed_losses(&straight));
    assert!(content(&job.out("signal")) == content(&job.out("straight")));
}

#[test]
fn train_mnist_cnn_resumes_exactly() {
    // 256 training images in batches of 32: 8 steps an epoch, 16 in all;
    // batch norm, dropout and shifted images all in play.
    let Some(job) = Job::new(
        "train_mnist_cnn",
        &[
            "--epochs",
            "2",
            "--channels",
            "4,8",
            "--hidden",
            "16",
            "--train-images",
            "256",
            "--test-images",
            "100",
            "--batch-size",
            "32",
            "--quiet",
        ],
    ) else {
        return;
    };
    let ks = stops("train_mnist_cnn", &[5, 8, 16], 1, 16, 35);
    resumes_exactly(&job, &ks, false);
}

#[test]
fn train_shakespeare_resumes_exactly() {
    // Every run stops at its last iteration (24), so the comparison is of
    // the final training states, and the scoring on the whole validation
    // split (minutes in a debug build) is left out. Dropout is on.
    let Some(job) = Job::new(
        "train_shakespeare",
        &[
            "--iters",
            "24",
            "--layers",
            "1",
            "--heads",
            "2",
            "--embd",
            "32",
            "--block-size",
            "16",
            "--batch-size",
            "4",
            "--eval-interval",
            "8",
            "--eval-iters",
            "2",
            "--dropout",
            "0.1",
            "--quiet",
            "--stop-after",
            "24",
        ],
    ) else {
        return;
    };
    let ks = stops("train_shakespeare", &[8, 23], 1, 24, 36);
    // The resumed runs stop at 24 too; a later `--stop-after` wins.
    resumes_exactly(&job, &ks, true);
}

/// `--compile` resumes exactly too: the CNN's batch norm statistics (a
/// state update of the capture) and dropout masks (drawn from the step's
/// seed and count), and the GPT with dropout in attention.
#[test]
fn compiled_jobs_resume_exactly() {
    let Some(cnn) = Job::new(
        "train_mnist_cnn",
        &[
            "--epochs",
            "2",
            "--channels",
            "4,8",
            "--hidden",
            "16",
            "--train-images",
            "256",
            "--test-images",
            "100",
            "--batch-size",
            "32",
            "--quiet",
            "--compile",
        ],
    ) else {
        return;
    };
    let ks = stops("train_mnist_cnn --compile", &[5, 8], 1, 16, 37);
    resumes_exactly(&cnn, &ks, false);
    let Some(gpt) = Job::new(
        "train_shakespeare",
        &[
            "--iters",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--embd",
            "32",
            "--block-size",
            "16",
            "--batch-size",
            "4",
            "--eval-interval",
            "8",
            "--eval-iters",
            "2",
            "--dropout",
            "0.1",
            "--quiet",
            "--compile",
            "--stop-after",
            "16",
        ],
    ) else {
        return;
    };
    resumes_exactly(&gpt, &[5], true);
}
