//! What the registry knows about each op besides its name: the facts that
//! test suites and tools read instead of keeping their own lists of ops.

use std::fmt;
use std::sync::Arc;

use super::differentiable::Differentiable;

/// How far random inputs keep from a kink, a tie or a domain edge, so that
/// finite differences and f32 rounding never straddle one.
pub const KINK_MARGIN: f64 = 0.05;

/// A safe domain for random inputs of an elementwise op: `true` for the
/// operand values of one element (one per input, after broadcasting) that
/// keep at least [`KINK_MARGIN`] from kinks and ties, inside the smooth part
/// of the function, and small enough that nothing overflows.
pub type Domain = fn(&[f64]) -> bool;

/// Example inputs of an op that is not elementwise (a convolution, a
/// pooling, a normalisation): f64 tensors of typical shapes whose values
/// come from `seed`, away from kinks and ties (distinct values for a
/// max-pool) so finite differences are valid. Suites that check every op's
/// gradient, tangent and second derivative call the op's
/// [`example`](OpFacts::example) (or the registered instance) on them.
pub type SampleInputs = fn(seed: u64) -> Vec<crate::tensor::Tensor>;

/// Sample values for [`SampleInputs`]: `scale · sin(0.37 i + 1.3 seed +
/// 0.1)` at element `i`, smooth in the seed and distinct within a tensor
/// of up to a few dozen elements (no ties for a max, no kinks for an
/// absolute value at typical scales).
pub fn sample_tensor(shape: &[usize], seed: u64, scale: f64) -> crate::tensor::Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| scale * (0.37 * i as f64 + 1.3 * seed as f64 + 0.1).sin())
        .collect();
    crate::tensor::Tensor::from_vec(v, shape).expect("a valid shape")
}

/// The facts an op declares about itself ([`Differentiable::facts`]).
#[derive(Clone)]
pub struct OpFacts {
    /// The number of inputs, if fixed.
    pub arity: Option<usize>,
    /// Whether the op maps elements to elements (broadcasting its inputs),
    /// so that a random input only has to respect [`domain`](Self::domain).
    pub elementwise: bool,
    /// Where random inputs are safe (see [`Domain`]); `None` when the op
    /// declares none (any finite value, or the op is not elementwise).
    pub domain: Option<Domain>,
    /// Whether `jvp` (forward mode) is implemented.
    pub tangent: bool,
    /// Whether the backward formula is itself differentiable
    /// (`create_graph`, Hessians).
    pub second_derivative: bool,
    /// A valid instance with typical parameters (clamp with both bounds,
    /// leaky ReLU with a visible slope), for suites that apply every op;
    /// `None` means the registered instance itself serves.
    pub example: Option<Arc<dyn Differentiable>>,
    /// Valid inputs for an op that is not elementwise (see [`SampleInputs`]);
    /// `None` for elementwise ops (their inputs come from
    /// [`domain`](Self::domain)) and for ops that declare none.
    pub sample_inputs: Option<SampleInputs>,
}

impl OpFacts {
    /// Facts of an op that declares nothing beyond its arity.
    pub fn opaque(arity: Option<usize>) -> Self {
        OpFacts {
            arity,
            elementwise: false,
            domain: None,
            tangent: false,
            second_derivative: false,
            example: None,
            sample_inputs: None,
        }
    }

    /// Facts of a structured op with a tangent rule and a differentiable
    /// backward: its `arity`, an `example` instance and its sample inputs
    /// (the shape most ops' `facts` take).
    pub fn differentiable(
        arity: Option<usize>,
        example: Arc<dyn Differentiable>,
        sample_inputs: SampleInputs,
    ) -> Self {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(example),
            sample_inputs: Some(sample_inputs),
            ..OpFacts::opaque(arity)
        }
    }

    /// Whether `values` (one per input) lie in the declared domain; true
    /// when none is declared.
    pub fn admits(&self, values: &[f64]) -> bool {
        self.domain.is_none_or(|d| d(values))
    }
}

impl fmt::Debug for OpFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpFacts")
            .field("arity", &self.arity)
            .field("elementwise", &self.elementwise)
            .field("domain", &self.domain.is_some())
            .field("tangent", &self.tangent)
            .field("second_derivative", &self.second_derivative)
            .field(
                "example",
                &self.example.as_ref().map(|e| e.name().to_string()),
            )
            .field("sample_inputs", &self.sample_inputs.is_some())
            .finish()
    }
}
