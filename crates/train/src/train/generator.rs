//! A ChaCha8 generator's whole state as text, for a training state's
//! metadata: `chacha8:<seed, 64 hex digits>:<stream>:<word position>`.
//! Restored with `from_seed`, `set_stream` and `set_word_pos`, it draws
//! exactly what the saved generator would have drawn next.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const PREFIX: &str = "chacha8:";

/// The text form of `rng`'s state.
pub(crate) fn encode(rng: &ChaCha8Rng) -> String {
    let seed: String = rng.get_seed().iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{seed}:{}:{}", rng.get_stream(), rng.get_word_pos())
}

/// The generator `text` describes, or why it describes none.
pub(crate) fn decode(text: &str) -> std::result::Result<ChaCha8Rng, String> {
    let bad = || {
        format!(
            "{text:?} is not a generator state ({PREFIX}<64 hex digits>:<stream>:<word position>)"
        )
    };
    let rest = text.strip_prefix(PREFIX).ok_or_else(bad)?;
    let mut parts = rest.split(':');
    let (Some(hex), Some(stream), Some(pos), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut seed = [0u8; 32];
    for (i, byte) in seed.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    let stream: u64 = stream.parse().map_err(|_| bad())?;
    let pos: u128 = pos.parse().map_err(|_| bad())?;
    // The word position is a 68-bit counter (16 words a block, 64-bit blocks).
    if pos >= 1 << 68 {
        return Err(bad());
    }
    let mut rng = ChaCha8Rng::from_seed(seed);
    rng.set_stream(stream);
    rng.set_word_pos(pos);
    Ok(rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore};

    #[test]
    fn a_decoded_generator_continues_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        rng.set_stream(7);
        for drawn in [0usize, 1, 15, 16, 17, 63, 64, 65, 1000] {
            let mut a = rng.clone();
            for _ in 0..drawn {
                a.next_u32();
            }
            let _: f64 = a.random();
            let mut b = decode(&encode(&a)).unwrap();
            assert_eq!(a, b);
            let next_a: Vec<u64> = (0..40).map(|_| a.next_u64()).collect();
            let next_b: Vec<u64> = (0..40).map(|_| b.next_u64()).collect();
            assert_eq!(next_a, next_b, "after {drawn} words");
        }
    }

    #[test]
    fn malformed_text_is_refused() {
        let good = encode(&ChaCha8Rng::seed_from_u64(1));
        assert!(decode(&good).is_ok());
        for bad in [
            String::new(),
            "chacha8:".to_string(),
            good.replace("chacha8", "chacha20"),
            good.replacen(':', "::", 2),
            format!("{good}:1"),
            good.replace(":0:", ":-1:"),
            format!("chacha8:{}:0:0", "zz".repeat(32)),
            format!("chacha8:{}:0:{}", "00".repeat(32), 1u128 << 70),
        ] {
            assert!(decode(&bad).is_err(), "{bad}");
        }
    }
}
