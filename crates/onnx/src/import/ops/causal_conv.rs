//! `CausalConvWithState` (opset 27): a depthwise 1-d convolution that
//! sees only the current and past positions, its left context carried
//! between calls as a state, composed of a concatenation, a grouped
//! `conv1d` and a slice so that it trains.

use super::Ctx;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::ops::nn::Conv1dOptions;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// Inputs `input` `[batch, channels, length]`, `weight` `[channels, 1,
/// k]`, optional `bias` `[channels]` and `past_state` `[batch, channels,
/// k - 1]` (zeros when omitted); outputs the convolution (with the fused
/// `activation`: `silu`/`swish` or `none`) and the last `k - 1` positions
/// of the state-prefixed input, the next call's state.
pub(super) fn causal_conv_with_state<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, w) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let (bias, past) = (c.opt(ins, 2), c.opt(ins, 3));
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 || ws[2] == 0 {
        return Err(c.error(format!(
            "an input of shape {xs:?} and a weight of shape {ws:?} \
             (want [batch, channels, length] and [channels, 1, k], k >= 1)"
        )));
    }
    let (batch, channels, len, k) = (xs[0], xs[1], xs[2], ws[2]);
    if let Some(b) = bias
        && b.shape() != [channels]
    {
        return Err(c.error(format!(
            "a bias of shape {:?} for {channels} channels",
            b.shape()
        )));
    }
    let past = match past {
        Some(p) if p.shape() == [batch, channels, k - 1] => p.clone(),
        Some(p) => {
            return Err(c.error(format!(
                "a past state of shape {:?} (want {:?})",
                p.shape(),
                [batch, channels, k - 1]
            )))
        }
        None => c.constant(Tensor::zeros(&[batch, channels, k - 1], x.dtype())?),
    };
    let padded = if k > 1 {
        Var::try_cat(&[&past, x], 2)?
    } else {
        x.clone()
    };
    let o = Conv1dOptions::new().groups(channels);
    let y = padded.try_conv1d(w, bias, &o)?;
    let y = match c.attrs.string("activation", "none")?.as_str() {
        "none" => y,
        "silu" | "swish" => y.try_silu()?,
        other => return Err(c.error(format!("activation {other:?} (none, silu, swish)"))),
    };
    // With k = 1 the state is empty: `[batch, channels, 0]`.
    let present = if k > 1 {
        padded.try_narrow(2, len as isize, k - 1)?
    } else {
        past
    };
    Ok(vec![y, present])
}

/// The activation is checked at load, with the other unsupported settings.
pub(super) fn check(a: &super::Attrs, _: i64) -> std::result::Result<(), String> {
    match a.string("activation", "none").as_deref() {
        Ok("none" | "silu" | "swish") => Ok(()),
        Ok(other) => Err(format!("activation {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
