//! Training states (`retrograd::train`): a user's
//! own loop, stopped after every possible step k, saved, loaded into
//! freshly built objects and resumed, ends bit for bit where the
//! uninterrupted run ends, with the same losses; damaged files load as
//! typed errors; the checkpoint directory keeps the newest good states; a
//! second SIGTERM or SIGINT ends the process at once.

use std::collections::BTreeMap;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::data::{Batches, Dataset};
use retrograd::io::{load_tensors, save_checkpoint, TensorFile};
use retrograd::nn::{manual_seed, with_default_generator, Forward, Mlp, Module, StateDict};
use retrograd::optim::{Adam, AdamConfig, CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::train::{CheckpointDir, Progress, RankState, TrainingState};
use retrograd::{DType, Error, Graph, Result, TensorProblem};

const EPOCHS: u64 = 3;
const BATCH: usize = 16;
/// 50 examples in batches of 16: 4 batches an epoch, the last one of 2.
const EXAMPLES: usize = 50;
const STEPS_PER_EPOCH: u64 = 4;

/// Runs draw from the process-wide default generator: one test at a time.
static DEFAULT_GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    DEFAULT_GENERATOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn dataset() -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let features = (0..EXAMPLES * 4)
        .map(|_| rng.random::<f64>() - 0.5)
        .collect();
    let labels = (0..EXAMPLES).map(|i| i % 3).collect();
    Dataset::new(features, 4, labels, 3).unwrap()
}

/// A user's training loop: an MLP with dropout, Adam on a cosine schedule,
/// shuffled batches (the generator kept as each epoch began), and a noise
/// factor drawn from the default generator every step.
struct Run {
    model: Mlp,
    opt: Adam,
    sched: LrScheduler,
    rng: ChaCha8Rng,
    epoch_start: ChaCha8Rng,
    at: Progress,
    losses: Vec<u32>,
}

impl Run {
    /// Built as every run builds it; `init` seeds the weights (a resumed
    /// run's are overwritten by the state).
    fn new(init: u64) -> Run {
        manual_seed(99);
        let model = Mlp::builder(&[4, 8, 3])
            .dropout(0.3)
            .seed(init)
            .build()
            .unwrap();
        let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(0.05)).unwrap();
        let total = (EPOCHS * STEPS_PER_EPOCH) as usize;
        let sched = LrScheduler::new(CosineAnnealingLr::new(total, 0.0).unwrap(), &mut opt);
        let rng = ChaCha8Rng::seed_from_u64(17);
        Run {
            model,
            opt,
            sched,
            epoch_start: rng.clone(),
            rng,
            at: Progress::default(),
            losses: Vec::new(),
        }
    }

    /// Trains until `stop_after` steps are done (or the end); true if it stopped early.
    fn train(&mut self, data: &Dataset, stop_after: Option<u64>) -> bool {
        while self.at.epoch < EPOCHS {
            if self.at.batch == 0 {
                self.epoch_start = self.rng.clone();
            }
            let mut order = self.epoch_start.clone();
            let batches = Batches::shuffled(data, BATCH, DType::F32, &mut order).unwrap();
            if self.at.batch == 0 {
                self.rng = order;
            }
            for batch in batches.skip_batches(self.at.batch as usize) {
                let noise: f64 = with_default_generator(|g| g.random());
                let grads = {
                    let g = Graph::new();
                    let x = g.constant(batch.features);
                    let loss = self.model.forward(&x).unwrap().cross_entropy(&batch.labels)
                        * (1.0 + 0.1 * noise);
                    self.losses.push((loss.value().item() as f32).to_bits());
                    loss.backward().unwrap()
                };
                self.opt.step(&grads).unwrap();
                self.sched.step(&mut self.opt);
                self.at.step += 1;
                self.at.batch += 1;
                if stop_after == Some(self.at.step) {
                    return true;
                }
            }
            self.at.epoch += 1;
            self.at.batch = 0;
        }
        false
    }

    fn capture(&self) -> Result<TrainingState> {
        let mine = RankState::new()
            .with_generator("shuffle", &self.rng)
            .with_generator("epoch_start", &self.epoch_start);
        TrainingState::capture(
            &self.model,
            Some(&self.opt),
            Some(&self.sched),
            self.at,
            mine,
        )
    }

    fn restore(&mut self, state: &TrainingState) -> Result<()> {
        let mine = state.restore(&self.model, Some(&mut self.opt), Some(&mut self.sched))?;
        self.rng = mine.generator("shuffle")?;
        self.epoch_start = mine.generator("epoch_start")?;
        self.at = state.progress();
        Ok(())
    }

    /// Everything that must end equal: parameters, optimizer state, rate.
    fn end(&self) -> (StateDict, StateDict, u64) {
        (
            self.model.state_dict(),
            self.opt.state_dict(),
            self.opt.lr().to_bits(),
        )
    }
}

fn bits(d: &StateDict) -> Vec<(String, Vec<u64>)> {
    d.iter()
        .map(|(k, t)| {
            (
                k.clone(),
                t.to_f64_vec().iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_run_stopped_after_any_step_and_resumed_is_the_same_run() {
    let _one_at_a_time = exclusive();
    let data = dataset();
    let mut straight = Run::new(1);
    straight.train(&data, None);
    let total = EPOCHS * STEPS_PER_EPOCH;
    assert_eq!(straight.at.step, total);
    let (params, opt_state, lr) = straight.end();
    let dir = tempfile::tempdir().unwrap();
    for k in 1..=total {
        let path = dir.path().join(format!("k{k}.safetensors"));
        let mut first = Run::new(1);
        assert!(first.train(&data, Some(k)));
        first.capture().unwrap().save(&path).unwrap();
        // Scramble the process-wide default generator, as a new process would have it.
        manual_seed(12345);
        let mut resumed = Run::new(2);
        resumed
            .restore(&TrainingState::load(&path).unwrap())
            .unwrap();
        assert_eq!(resumed.at.step, k);
        resumed.train(&data, None);
        let mut losses = first.losses.clone();
        losses.extend(&resumed.losses);
        assert_eq!(losses, straight.losses, "losses after stopping at step {k}");
        let (p, o, l) = resumed.end();
        assert_eq!(
            bits(&p),
            bits(&params),
            "parameters after stopping at step {k}"
        );
        assert_eq!(
            bits(&o),
            bits(&opt_state),
            "Adam state after stopping at step {k}"
        );
        assert_eq!(l, lr, "learning rate after stopping at step {k}");
    }
}

#[test]
fn a_run_stopped_twice_is_still_the_same_run() {
    let _one_at_a_time = exclusive();
    let data = dataset();
    let mut straight = Run::new(1);
    straight.train(&data, None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.safetensors");
    let mut run = Run::new(1);
    let mut losses = Vec::new();
    for stop in [3, 7] {
        run.train(&data, Some(stop));
        run.capture().unwrap().save(&path).unwrap();
        losses.extend(std::mem::take(&mut run.losses));
        run = Run::new(3);
        run.restore(&TrainingState::load(&path).unwrap()).unwrap();
    }
    run.train(&data, None);
    losses.extend(&run.losses);
    assert_eq!(losses, straight.losses);
    assert_eq!(bits(&run.end().0), bits(&straight.end().0));
}

#[test]
fn restoring_into_the_wrong_objects_is_an_error_that_changes_nothing() {
    let _one_at_a_time = exclusive();
    let data = dataset();
    let mut run = Run::new(1);
    run.train(&data, Some(5));
    let state = run.capture().unwrap();

    // Another width: a typed error naming the tensor; nothing changed.
    let other = Mlp::builder(&[4, 9, 3])
        .dropout(0.3)
        .seed(1)
        .build()
        .unwrap();
    let mut opt = Adam::new(other.parameters(), AdamConfig::default()).unwrap();
    let before = (bits(&other.state_dict()), opt.state_dict(), opt.lr());
    let stream = other.random_streams()[0].1.position();
    let e = state.restore(&other, Some(&mut opt), None).unwrap_err();
    assert!(matches!(e, Error::TensorMismatch { .. }), "{e}");
    assert_eq!(
        (bits(&other.state_dict()), opt.state_dict(), opt.lr()),
        before
    );
    assert_eq!(other.random_streams()[0].1.position(), stream);

    // No dropout: the saved stream has no layer to go to.
    let plain = Mlp::builder(&[4, 8, 3]).seed(1).build().unwrap();
    let e = state.restore(&plain, None, None).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Unexpected, .. } if name == "2"),
        "names the stream: {e}"
    );

    // More ranks than the state was written by.
    let fresh = Run::new(4);
    let e = state
        .restore_rank(&fresh.model, None, None, 0, 2)
        .unwrap_err();
    assert!(e.to_string().contains("1 rank"), "{e}");

    // A generator the state does not hold is named.
    let e = state.rank(0).unwrap().generator("augment").unwrap_err();
    assert!(
        e.to_string().contains("augment") && e.to_string().contains("shuffle"),
        "{e}"
    );
}

#[test]
fn settings_and_layouts_are_checked() {
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let run = Run::new(1);
    let config = BTreeMap::from([("lr".to_string(), "0.05".to_string())]);
    let state = run.capture().unwrap().with_config(config.clone());
    let path = dir.path().join("s.safetensors");
    state.save(&path).unwrap();
    let loaded = TrainingState::load(&path).unwrap();
    loaded.check_config(&config).unwrap();
    let e = loaded
        .check_config(&BTreeMap::from([("lr".to_string(), "0.1".to_string())]))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("lr is 0.05 in the checkpoint, 0.1 in this run"),
        "{e}"
    );

    // A model checkpoint is not a training state.
    let model_only = dir.path().join("model.safetensors");
    save_checkpoint(&model_only, &run.model, Some(&run.opt)).unwrap();
    let e = TrainingState::load(&model_only).unwrap_err();
    assert!(
        matches!(&e, Error::Format { reason, .. } if reason.contains("without a training state")),
        "{e}"
    );

    // Another layout version, rewritten with a valid checksum.
    let mut file = load_tensors(&path).unwrap();
    file.metadata.insert("training_state".into(), "2".into());
    let other = dir.path().join("v2.safetensors");
    rewrite(&other, file);
    let e = TrainingState::load(&other).unwrap_err();
    assert!(
        matches!(&e, Error::Format { reason, .. } if reason.contains("version \"2\"")),
        "{e}"
    );

    // A training state still loads as a model checkpoint.
    retrograd::io::load_checkpoint(&path, &run.model, None).unwrap();
}

/// Writes `file` with its checksum recomputed: a state that is well
/// formed as a file but says something else.
fn rewrite(path: &Path, mut file: TensorFile) {
    file.metadata.remove("checksum");
    retrograd::io::save_tensors(path, &file.tensors, &file.metadata).unwrap();
}

/// The tensors and metadata of a file, to compare what loaded with what was saved.
fn content(state: &TrainingState, dir: &Path) -> TensorFile {
    let path = dir.join("content.safetensors");
    state.save(&path).unwrap();
    let mut f = load_tensors(&path).unwrap();
    f.metadata.remove("checksum");
    f
}

#[test]
fn truncated_and_flipped_files_load_as_typed_errors() {
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let data = dataset();
    let mut run = Run::new(1);
    run.train(&data, Some(6));
    let state = run.capture().unwrap();
    let path = dir.path().join("s.safetensors");
    state.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let original = content(&state, dir.path());
    let damaged = dir.path().join("damaged.safetensors");
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let (mut errors, mut harmless) = (0, 0);
    let mut check = |what: String, file: &[u8]| {
        std::fs::write(&damaged, file).unwrap();
        match TrainingState::load(&damaged) {
            Err(Error::Format { .. }) => errors += 1,
            Err(e) => panic!("{what}: {e:?} is not Error::Format"),
            // Only a change that leaves the content as it was may load
            // (a space of the header's padding turned into a tab).
            Ok(s) => {
                let got = content(&s, dir.path());
                assert_eq!(got, original, "{what} loaded as a different state");
                harmless += 1;
            }
        }
    };
    for _ in 0..200 {
        let at = rng.random_range(0..bytes.len());
        check(format!("truncated to {at} bytes"), &bytes[..at]);
    }
    for _ in 0..400 {
        let at = rng.random_range(0..bytes.len());
        let mut flipped = bytes.clone();
        flipped[at] ^= rng.random_range(1..=255u8);
        check(format!("byte {at} flipped"), &flipped);
    }
    println!(
        "{} bytes: {errors} damaged copies refused, {harmless} loaded the same state",
        bytes.len()
    );
    assert!(errors >= 590, "{errors} of 600 refused");
}

#[test]
fn the_directory_keeps_the_newest_and_falls_back_past_damage() {
    let _one_at_a_time = exclusive();
    let tmp = tempfile::tempdir().unwrap();
    let dir = CheckpointDir::open(tmp.path().join("c"), 3).unwrap();
    let data = dataset();
    let mut run = Run::new(1);
    for stop in [2, 4, 6, 8, 10] {
        run.train(&data, Some(stop));
        let written = dir.save(&run.capture().unwrap()).unwrap();
        assert!(written.ends_with(format!("step-{stop:09}.safetensors")));
    }
    let steps: Vec<u64> = dir.list().unwrap().into_iter().map(|(s, _)| s).collect();
    assert_eq!(steps, [6, 8, 10]);
    // Truncate the newest, flip a byte of the next: the oldest is used.
    let newest = dir.path_for(10);
    let len = std::fs::metadata(&newest).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(len / 2).unwrap();
    let middle = dir.path_for(8);
    let mut bytes = std::fs::read(&middle).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x40;
    std::fs::write(&middle, bytes).unwrap();
    let found = dir.newest_good().unwrap().unwrap();
    assert_eq!(found.state.progress().step, 6);
    let skipped: Vec<&Path> = found.skipped.iter().map(|(p, _)| p.as_path()).collect();
    assert_eq!(skipped, [newest.as_path(), middle.as_path()]);
    assert!(found.skipped[1].1.to_string().contains("checksum mismatch"));
    // A write cut short leaves a temporary file, which opening removes.
    std::fs::write(
        dir.dir().join(".step-000000012.safetensors.abc123.tmp"),
        b"half",
    )
    .unwrap();
    let again = CheckpointDir::open(dir.dir(), 3).unwrap();
    assert_eq!(again.list().unwrap().len(), 3);
    assert!(std::fs::read_dir(dir.dir()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
    assert!(CheckpointDir::open(tmp.path().join("d"), 0).is_err());
}

/// The child half of the signal tests: set up the handlers, raise the
/// signals named in `RETROGRAD_SIGNAL_CHILD` one after the other.
fn signal_child(plan: &str) {
    use retrograd::train::{Signal, StopSignal};
    let stop = StopSignal::install().unwrap();
    for (i, name) in plan.split(',').enumerate() {
        let n = match name {
            "TERM" => Signal::Terminate.number(),
            _ => Signal::Interrupt.number(),
        };
        signal_hook::low_level::raise(n).unwrap();
        if i == 0 {
            // The first only asks: the flag is up, and the process lives on.
            let got = stop.received().expect("the first signal is recorded");
            println!("first signal: {}", got.name());
        }
    }
    println!("still running");
    std::process::exit(0);
}

#[test]
#[cfg(unix)]
fn a_second_signal_ends_the_process_at_once() {
    if let Ok(plan) = std::env::var("RETROGRAD_SIGNAL_CHILD") {
        signal_child(&plan);
        return;
    }
    let me = std::env::current_exe().unwrap();
    for (plan, code, first) in [
        ("TERM", 0, "SIGTERM"),
        ("INT", 0, "SIGINT"),
        ("TERM,TERM", 143, "SIGTERM"),
        ("TERM,INT", 130, "SIGTERM"),
        ("INT,INT", 130, "SIGINT"),
    ] {
        let out = std::process::Command::new(&me)
            .args([
                "--exact",
                "a_second_signal_ends_the_process_at_once",
                "--nocapture",
            ])
            .env("RETROGRAD_SIGNAL_CHILD", plan)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{plan}: {stdout}");
        assert!(
            stdout.contains(&format!("first signal: {first}")),
            "{plan}: {stdout}"
        );
        assert_eq!(
            stdout.contains("still running"),
            code == 0,
            "{plan}: {stdout}"
        );
    }
}

/// The child half of the kill test: writes a 4 MiB state every step, for ever.
fn writer_child(dir: &str) {
    let big = retrograd::nn::Linear::builder(1024, 1024)
        .dtype(DType::F32)
        .build()
        .unwrap();
    let dir = CheckpointDir::open(dir, 2).unwrap();
    for step in 1.. {
        let at = Progress {
            step,
            ..Progress::default()
        };
        let state = TrainingState::capture(&big, None, None, at, RankState::new()).unwrap();
        dir.save(&state).unwrap();
    }
}

#[test]
#[cfg(unix)]
fn a_process_killed_while_writing_leaves_only_good_states() {
    if let Ok(dir) = std::env::var("RETROGRAD_WRITER_CHILD") {
        writer_child(&dir);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut cut_short = 0;
    for round in 0..3 {
        let dir = tmp.path().join(format!("round{round}"));
        let mut child = std::process::Command::new(&me)
            .args([
                "--exact",
                "a_process_killed_while_writing_leaves_only_good_states",
            ])
            .env("RETROGRAD_WRITER_CHILD", &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Once the first state is complete, wait a random while, then kill
        // it as soon as a write is under way (a temporary file is there).
        while !dir.join("step-000000001.safetensors").exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let delay = rng.random_range(0..100);
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let writing = || {
            std::fs::read_dir(&dir)
                .unwrap()
                .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp"))
        };
        let started = std::time::Instant::now();
        while !writing() && started.elapsed() < std::time::Duration::from_secs(2) {}
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let temporaries = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        cut_short += temporaries;
        let opened = CheckpointDir::open(&dir, 2).unwrap();
        let states = opened.list().unwrap();
        assert!(!states.is_empty() && states.len() <= 3, "{states:?}");
        for (_, path) in &states {
            TrainingState::load(path).unwrap();
        }
        println!(
            "killed {delay} ms after the first state: {} states, all load; {temporaries} write(s) cut short",
            states.len()
        );
    }
    println!("{cut_short} of 3 kills landed inside a write");
}

#[test]
fn gathering_on_one_process_keeps_its_own_state() {
    let _one_at_a_time = exclusive();
    let run = Run::new(1);
    let state = run
        .capture()
        .unwrap()
        .gather(&retrograd::distributed::SingleProcess)
        .unwrap();
    assert_eq!(state.num_ranks(), 1);
    assert!(state.rank(0).unwrap().default_generator().is_some());
}
