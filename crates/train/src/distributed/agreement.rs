//! Small collective decisions every rank must take the same way: whether
//! any rank asked to stop, whether every rank succeeded, and whether every
//! rank describes something (its settings, its data, the checkpoint it
//! resumes from) as rank 0 does. Each is one all-gather of a few bytes.

use super::comm::Communicator;
use retrograd_engine::{Error, Result};

/// Whether `mine` is true on any rank. Collective.
///
/// ```
/// use retrograd::distributed::{any_rank, SingleProcess};
/// assert!(any_rank(&SingleProcess, true)?);
/// assert!(!any_rank(&SingleProcess, false)?);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn any_rank<C: Communicator + ?Sized>(comm: &C, mine: bool) -> Result<bool> {
    if comm.size() == 1 {
        return Ok(mine);
    }
    let all = comm.all_gather_bytes(&[u8::from(mine)])?;
    Ok(all.iter().any(|b| b.first() == Some(&1)))
}

/// Shares every rank's outcome: `Ok` everywhere only if every rank
/// succeeded; otherwise this rank's own error, or an
/// [`Error::Communication`] naming the first rank that failed and why.
/// Collective.
///
/// ```
/// use retrograd::distributed::{all_succeeded, SingleProcess};
/// assert_eq!(all_succeeded(&SingleProcess, "save", Ok(3))?, 3);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn all_succeeded<C: Communicator + ?Sized, T>(
    comm: &C,
    op: &'static str,
    local: Result<T>,
) -> Result<T> {
    let mine = match &local {
        Ok(_) => Vec::new(),
        Err(e) => e.to_string().into_bytes(),
    };
    let all = comm.all_gather_bytes(&mine)?;
    let value = local?;
    match all.iter().enumerate().find(|(_, m)| !m.is_empty()) {
        Some((rank, message)) => Err(Error::Communication {
            op,
            detail: format!("rank {rank} failed: {}", String::from_utf8_lossy(message)),
        }),
        None => Ok(value),
    }
}

/// Checks that every rank's `lines` (one setting or fact per line: `--lr
/// 0.002`, `data: 4000 images, crc32 1a2b3c4d`) are rank 0's; otherwise
/// every rank gets the same [`Error::ReplicaMismatch`], naming the lowest
/// rank that differs and its first differing line. Collective.
///
/// ```
/// use retrograd::distributed::{same_on_every_rank, SingleProcess};
/// same_on_every_rank(&SingleProcess, "train", &["--lr 0.002".to_string()])?;
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn same_on_every_rank<C: Communicator + ?Sized>(
    comm: &C,
    op: &'static str,
    lines: &[String],
) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let all = comm.all_gather_bytes(lines.join("\n").as_bytes())?;
    let lines: Vec<Vec<String>> = all
        .iter()
        .map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect();
    first_difference(op, &lines)
}

/// The lowest rank whose lines differ from rank 0's, as an error.
pub(crate) fn first_difference(op: &'static str, lines: &[Vec<String>]) -> Result<()> {
    let Some(reference) = lines.first() else {
        return Ok(());
    };
    for (rank, theirs) in lines.iter().enumerate().skip(1) {
        let n = reference.len().max(theirs.len());
        if let Some(k) = (0..n).find(|&k| reference.get(k) != theirs.get(k)) {
            let show =
                |l: Option<&String>| l.cloned().unwrap_or_else(|| "nothing more".to_string());
            return Err(Error::ReplicaMismatch {
                op,
                rank,
                detail: format!(
                    "entry {k}: rank 0 has {}, rank {rank} has {}",
                    show(reference.get(k)),
                    show(theirs.get(k))
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_names_the_rank_and_both_lines() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let same = vec![lines(&["a 1", "b 2"]), lines(&["a 1", "b 2"])];
        first_difference("t", &same).unwrap();
        let differ = vec![
            lines(&["a 1", "b 2"]),
            lines(&["a 1", "b 2"]),
            lines(&["a 1", "b 3"]),
        ];
        let e = first_difference("t", &differ).unwrap_err();
        assert!(
            matches!(&e, Error::ReplicaMismatch { rank: 2, detail, .. }
                if detail == "entry 1: rank 0 has b 2, rank 2 has b 3"),
            "{e}"
        );
        let shorter = vec![lines(&["a 1", "b 2"]), lines(&["a 1"])];
        let e = first_difference("t", &shorter).unwrap_err();
        assert!(e.to_string().contains("rank 1 has nothing more"), "{e}");
    }
}
