//! [`LlamaCache`]: the keys and values of the positions a sequence has
//! seen, per layer, written in place.
//!
//! Each layer keeps one buffer of keys and one of values,
//! `[batch, kv_heads, capacity, head_dim]`, with room past the positions in
//! use. A new position is copied into the room left (rounded to f16 on the
//! way when the cache rounds), and attention reads the positions in use as
//! a view of the buffer, whose rows are contiguous per head, so nothing is
//! concatenated: a token costs one position's copy, not the whole
//! history's. When the room runs out the buffer grows by half (at least 64
//! positions), so copies stay linear in the sequence's length overall.

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::tensor::{DType, Tensor};

/// Positions a buffer's capacity is rounded up to.
const GROWTH_STEP: usize = 64;

/// Keys and values of the positions seen so far, per layer, for
/// generation ([`Llama::forward_cached`](super::Llama::forward_cached)).
///
/// By default the cache rounds keys and values to f16 as it stores them,
/// as llama.cpp's does (the new positions attend to their rounded keys
/// too): the quantized path then follows llama.cpp's arithmetic.
/// [`exact`](Self::exact) keeps them in f32, so that generation gives the
/// logits of the whole sequence at once.
///
/// Cloning a cache shares its buffers until either clone writes a new
/// position, which then copies them (copy on write).
#[derive(Clone, Debug)]
pub struct LlamaCache {
    pub(super) layers: Vec<Option<LayerCache>>,
    pub(super) len: usize,
    pub(super) half: bool,
}

impl Default for LlamaCache {
    fn default() -> Self {
        LlamaCache {
            layers: Vec::new(),
            len: 0,
            half: true,
        }
    }
}

impl LlamaCache {
    /// An empty cache rounding keys and values to f16 (llama.cpp's).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache keeping keys and values in f32.
    pub fn exact() -> Self {
        LlamaCache {
            half: false,
            ..Self::default()
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the buffers hold room for before they grow (0 when empty).
    pub fn capacity(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(LayerCache::capacity)
            .min()
            .unwrap_or(0)
    }

    /// Forgets every position (a new conversation) and frees the buffers.
    pub fn clear(&mut self) {
        self.layers.clear();
        self.len = 0;
    }

    /// Keeps the first `len` positions only (a shared prompt prefix); the
    /// buffers keep their room, and the next positions overwrite the rest.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        self.len = self.len.min(len);
        Ok(())
    }

    /// Makes room for `layers` layers (a cache is made before it knows the
    /// model).
    pub(super) fn fit_layers(&mut self, layers: usize) {
        if self.layers.len() != layers {
            self.layers = vec![None; layers];
            self.len = 0;
        }
    }
}

/// One layer's key and value buffers, `[batch, kv_heads, capacity,
/// head_dim]` each.
#[derive(Clone, Debug)]
pub(super) struct LayerCache {
    keys: Tensor,
    values: Tensor,
}

impl LayerCache {
    fn capacity(&self) -> usize {
        self.keys.shape()[2]
    }

    /// Writes the new keys and values `[batch, kv_heads, t, head_dim]` at
    /// positions `past..past + t` of `slot` (rounded to f16 when `half`),
    /// growing its buffers when they are full, and returns views of
    /// positions `0..past + t`: what the new positions attend to.
    pub(super) fn append(
        slot: &mut Option<LayerCache>,
        past: usize,
        keys: &Tensor,
        values: &Tensor,
        half: bool,
    ) -> Result<(Tensor, Tensor)> {
        let shape = keys.shape();
        if shape.len() != 4 || values.shape() != shape || keys.dtype() != DType::F32 {
            return Err(Error::invalid(
                "LlamaCache",
                format!(
                    "keys and values must be f32 [batch, kv_heads, positions, head_dim] alike; got {:?} and {:?}",
                    shape,
                    values.shape()
                ),
            ));
        }
        let (b, heads, t, width) = (shape[0], shape[1], shape[2], shape[3]);
        let used = past + t;
        let fits = |c: &LayerCache| {
            let s = c.keys.shape();
            s[0] == b && s[1] == heads && s[3] == width && past <= s[2]
        };
        match slot.as_ref() {
            Some(c) if fits(c) => {}
            // Positions to keep that do not fit: an error, the cache kept.
            _ if past > 0 => {
                return Err(Error::invalid(
                    "LlamaCache",
                    format!("{past} cached positions do not fit new keys {shape:?}"),
                ));
            }
            // An empty cache, or another shape (a new batch), starts over.
            _ => *slot = Some(LayerCache::empty(b, heads, width)?),
        }
        let layer = slot.as_mut().expect("set above");
        layer.grow(past, used)?;
        for (buffer, new) in [(&mut layer.keys, keys), (&mut layer.values, values)] {
            let capacity = buffer.shape()[2];
            let new = new.contiguous();
            let src = new.as_slice_of::<f32>();
            let dst = buffer.make_mut::<f32>()?;
            for (head, rows) in src.chunks_exact(t * width).enumerate() {
                let at = (head * capacity + past) * width;
                let dst = &mut dst[at..at + t * width];
                if half {
                    for (d, &s) in dst.iter_mut().zip(rows) {
                        *d = half::f16::from_f32(s).to_f32();
                    }
                } else {
                    dst.copy_from_slice(rows);
                }
            }
        }
        Ok((
            layer.keys.narrow(2, 0, used)?,
            layer.values.narrow(2, 0, used)?,
        ))
    }

    fn empty(b: usize, heads: usize, width: usize) -> Result<LayerCache> {
        Ok(LayerCache {
            keys: Tensor::zeros(&[b, heads, 0, width], DType::F32)?,
            values: Tensor::zeros(&[b, heads, 0, width], DType::F32)?,
        })
    }

    /// Moves positions `0..past` into buffers with room for `used`, if
    /// these have less.
    fn grow(&mut self, past: usize, used: usize) -> Result<()> {
        let capacity = self.capacity();
        if used <= capacity {
            return Ok(());
        }
        let room = used
            .max(capacity + (capacity / 2).max(GROWTH_STEP))
            .next_multiple_of(GROWTH_STEP);
        let grow = |old: &Tensor| -> Result<Tensor> {
            let s = old.shape();
            let (rows, width) = (s[0] * s[1], s[3]);
            let mut data = vec![0.0f32; rows * room * width];
            let old = old.as_slice_of::<f32>();
            for r in 0..rows {
                let from = &old[r * capacity * width..][..past * width];
                data[r * room * width..][..past * width].copy_from_slice(from);
            }
            Tensor::from_vec(data, &[s[0], s[1], room, width])
        };
        let (keys, values) = (grow(&self.keys)?, grow(&self.values)?);
        (self.keys, self.values) = (keys, values);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(b: usize, heads: usize, from: usize, t: usize, width: usize) -> Tensor {
        let mut v = Vec::new();
        for i in 0..b * heads {
            for p in from..from + t {
                v.extend((0..width).map(|w| (i * 1000 + p * 10 + w) as f32 + 0.1));
            }
        }
        Tensor::from_vec(v, &[b, heads, t, width]).unwrap()
    }

    #[test]
    fn appended_positions_read_back_as_one_sequence() {
        let (b, heads, width) = (2, 3, 4);
        let mut slot = None;
        let mut past = 0;
        // A prompt, then single positions past the first growth, then a
        // chunk that forces another.
        for t in [5, 1, 1, 70, 1, 200] {
            let k = positions(b, heads, past, t, width);
            let v = Tensor::from_vec(
                k.to_vec::<f32>().unwrap().iter().map(|x| 2.0 * x).collect(),
                k.shape(),
            )
            .unwrap();
            let (ks, vs) = LayerCache::append(&mut slot, past, &k, &v, false).unwrap();
            past += t;
            let want = positions(b, heads, 0, past, width);
            assert_eq!(ks.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            let doubled: Vec<f32> = want
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| 2.0 * x)
                .collect();
            assert_eq!(vs.to_vec::<f32>().unwrap(), doubled);
            assert!(slot.as_ref().unwrap().capacity() >= past);
        }
        // Growth is geometric: a handful of buffers for 278 positions.
        assert_eq!(slot.unwrap().capacity() % GROWTH_STEP, 0);
    }

    #[test]
    fn half_rounds_as_f16_and_truncation_overwrites() {
        let mut slot = None;
        let k = Tensor::from_vec(vec![1.0f32 / 3.0; 4], &[1, 1, 2, 2]).unwrap();
        let (ks, _) = LayerCache::append(&mut slot, 0, &k, &k, true).unwrap();
        let third = half::f16::from_f32(1.0 / 3.0).to_f32();
        assert_eq!(ks.to_vec::<f32>().unwrap(), vec![third; 4]);
        // Back to one position: the second is overwritten.
        let k2 = Tensor::from_vec(vec![7.0f32; 2], &[1, 1, 1, 2]).unwrap();
        let (ks, _) = LayerCache::append(&mut slot, 1, &k2, &k2, true).unwrap();
        assert_eq!(ks.to_vec::<f32>().unwrap(), vec![third, third, 7.0, 7.0]);
    }

    #[test]
    fn a_clone_keeps_its_positions_when_the_other_writes() {
        let mut slot = None;
        let k = positions(1, 1, 0, 3, 2);
        LayerCache::append(&mut slot, 0, &k, &k, false).unwrap();
        let kept = slot.clone();
        let k2 = Tensor::from_vec(vec![9.0f32; 2], &[1, 1, 1, 2]).unwrap();
        LayerCache::append(&mut slot, 1, &k2, &k2, false).unwrap();
        let kept = kept.unwrap().keys.narrow(2, 0, 3).unwrap();
        assert_eq!(kept.to_vec::<f32>().unwrap(), k.to_vec::<f32>().unwrap());
    }

    #[test]
    fn mismatched_keys_are_an_error() {
        let mut slot = None;
        let k = positions(1, 2, 0, 3, 2);
        LayerCache::append(&mut slot, 0, &k, &k, false).unwrap();
        let other = positions(1, 3, 3, 1, 2);
        assert!(LayerCache::append(&mut slot, 3, &other, &other, false).is_err());
        let flat = Tensor::zeros(&[3, 2], DType::F32).unwrap();
        assert!(LayerCache::append(&mut None, 0, &flat, &flat, false).is_err());
    }
}
