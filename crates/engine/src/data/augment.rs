//! Data augmentation for image batches: random translations, the cheap
//! augmentation that matters most for small digit sets.

use rand::Rng;

use crate::base::error::{Error, Result};
use crate::tensor::{Element, Tensor};

/// Moves each image of a batch `[N, C, H, W]` by its own random offset of at
/// most `max_shift` pixels along each axis (uniform in
/// `-max_shift..=max_shift`), filling the uncovered border with `fill`
/// (the background: 0 for raw pixels, `-mean / std` after normalising).
/// All channels of an image move together. The offsets come from `rng`, so
/// a seeded generator gives the same batches every run.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{Tensor, data::random_shift};
/// let x = Tensor::from_vec((1..=9).map(f64::from).collect(), &[1, 1, 3, 3])?;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let y = random_shift(&x, 1, 0.0, &mut rng)?;
/// assert_eq!(y.shape(), &[1, 1, 3, 3]);
/// // No shift leaves the batch as it is.
/// assert_eq!(random_shift(&x, 0, 0.0, &mut rng)?.to_f64_vec(), x.to_f64_vec());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn random_shift<R: Rng + ?Sized>(
    images: &Tensor,
    max_shift: usize,
    fill: f64,
    rng: &mut R,
) -> Result<Tensor> {
    let shape = images.shape();
    let [n, c, h, w] = shape else {
        return Err(Error::invalid(
            "random_shift",
            format!("expected a batch of images [N, C, H, W], got shape {shape:?}"),
        ));
    };
    let (n, c, h, w) = (*n, *c, *h, *w);
    let m = max_shift as i64;
    let shifts: Vec<(i64, i64)> = (0..n)
        .map(|_| (rng.random_range(-m..=m), rng.random_range(-m..=m)))
        .collect();
    crate::with_dtype!("random_shift", images.dtype(), T => {
        let src = images.as_slice_of::<T>();
        let fill = T::from_f64(fill);
        let mut out = vec![fill; src.len()];
        for (i, &(dy, dx)) in shifts.iter().enumerate() {
            for plane in 0..c {
                let base = (i * c + plane) * h * w;
                shift_plane::<T>(&src[base..base + h * w], &mut out[base..base + h * w], h, w, dy, dx);
            }
        }
        Tensor::from_vec(out, shape)
    })
}

/// `out[y][x] = src[y - dy][x - dx]` where that lies inside the plane.
fn shift_plane<T: Element>(src: &[T], out: &mut [T], h: usize, w: usize, dy: i64, dx: i64) {
    for y in 0..h as i64 {
        let sy = y - dy;
        if sy < 0 || sy >= h as i64 {
            continue;
        }
        let x0 = dx.max(0);
        let x1 = (w as i64 + dx).min(w as i64);
        if x0 >= x1 {
            continue;
        }
        let (row, src_row) = (y as usize * w, sy as usize * w);
        let len = (x1 - x0) as usize;
        let from = (x0 - dx) as usize;
        out[row + x0 as usize..row + x0 as usize + len]
            .copy_from_slice(&src[src_row + from..src_row + from + len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn shifts_move_pixels_and_fill_the_border() {
        let mut out = vec![0.0; 9];
        let src: Vec<f64> = (1..=9).map(f64::from).collect();
        shift_plane(&src, &mut out, 3, 3, 1, -1);
        // Down one row, left one column.
        assert_eq!(out, vec![0.0, 0.0, 0.0, 2.0, 3.0, 0.0, 5.0, 6.0, 0.0]);
        let x =
            Tensor::from_vec((0..2 * 2 * 4 * 4).map(f64::from).collect(), &[2, 2, 4, 4]).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let y = random_shift(&x, 2, -1.0, &mut rng).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        assert_eq!(
            y.to_f64_vec(),
            random_shift(&x, 2, -1.0, &mut rng).unwrap().to_f64_vec()
        );
        // Every value is a fill or comes from the same image and channel.
        for (i, v) in y.to_f64_vec().into_iter().enumerate() {
            assert!(v == -1.0 || (v as usize) / 16 == i / 16, "{i}: {v}");
        }
        let flat = Tensor::from_vec(vec![1.0; 4], &[2, 2]).unwrap();
        assert!(random_shift(&flat, 1, 0.0, &mut rng).is_err());
    }
}
