//! Speaker identification on tiny Shakespeare: the speeches of the most
//! frequent speakers, labelled by speaker, split per speaker with a seeded
//! shuffle simple enough to repeat in any language (SplitMix64 and
//! Fisher-Yates; `bench/finetune_speakers.py` does it in Python).

use crate::shakespeare::Speech;
use retrograd_engine::base::error::{Error, Result};

/// A labelled text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labelled {
    /// The speech.
    pub text: String,
    /// The index of its speaker in [`SpeakerTask::speakers`].
    pub label: i64,
}

/// The speeches of the `n` most frequent speakers, split into training and
/// test speeches.
#[derive(Clone, Debug)]
pub struct SpeakerTask {
    /// The speakers, most speeches first (ties by name); a label indexes this.
    pub speakers: Vec<String>,
    /// Training speeches, speaker by speaker.
    pub train: Vec<Labelled>,
    /// Test speeches, speaker by speaker.
    pub test: Vec<Labelled>,
}

/// SplitMix64: the next value of the generator at `state`.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A permutation of `0..n` from `seed`: Fisher-Yates from the last element
/// down, swapping element `i` with element `splitmix64() % (i + 1)`.
///
/// ```
/// use retrograd::data::speakers::seeded_permutation;
/// assert_eq!(seeded_permutation(5, 0), seeded_permutation(5, 0));
/// let mut p = seeded_permutation(100, 7);
/// p.sort();
/// assert_eq!(p, (0..100).collect::<Vec<_>>());
/// ```
pub fn seeded_permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The speeches of the `n` most frequent speakers of `speeches`. Each
/// speaker's speeches are shuffled by `seeded_permutation(count, seed +
/// label)`, and the first `round(count · test_fraction)` of them are the
/// test set.
///
/// ```
/// use retrograd::data::{shakespeare, speakers};
/// let all = shakespeare::speeches(&shakespeare::load_bundled()?);
/// let task = speakers::speaker_task(&all, 10, 0.2, 0)?;
/// assert_eq!(task.speakers[..3], ["GLOUCESTER", "DUKE VINCENTIO", "MENENIUS"]);
/// assert_eq!((task.train.len(), task.test.len()), (1229, 307));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn speaker_task(
    speeches: &[Speech],
    n: usize,
    test_fraction: f64,
    seed: u64,
) -> Result<SpeakerTask> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in speeches {
        *counts.entry(&s.speaker).or_default() += 1;
    }
    if n == 0 || n > counts.len() || !(0.0..1.0).contains(&test_fraction) {
        return Err(Error::invalid(
            "speaker_task",
            format!(
                "{n} speakers of {} with test fraction {test_fraction}: need 1..={} speakers and a fraction in [0, 1)",
                counts.len(),
                counts.len()
            ),
        ));
    }
    let mut ranked: Vec<(&str, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let speakers: Vec<String> = ranked[..n].iter().map(|(s, _)| s.to_string()).collect();
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (label, speaker) in speakers.iter().enumerate() {
        let own: Vec<&Speech> = speeches.iter().filter(|s| &s.speaker == speaker).collect();
        let n_test = (own.len() as f64 * test_fraction).round() as usize;
        for (k, &i) in seeded_permutation(own.len(), seed + label as u64)
            .iter()
            .enumerate()
        {
            let item = Labelled {
                text: own[i].text.clone(),
                label: label as i64,
            };
            if k < n_test {
                test.push(item);
            } else {
                train.push(item);
            }
        }
    }
    Ok(SpeakerTask {
        speakers,
        train,
        test,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_its_reference_values() {
        // SplitMix64 from seed 0: the published first outputs.
        let mut s = 0;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(&mut s), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn bad_requests_are_errors() {
        let speeches = vec![Speech {
            speaker: "A".into(),
            text: "x".into(),
        }];
        assert!(speaker_task(&speeches, 2, 0.2, 0).is_err());
        assert!(speaker_task(&speeches, 1, 1.0, 0).is_err());
        assert_eq!(speaker_task(&speeches, 1, 0.2, 0).unwrap().train.len(), 1);
    }
}
