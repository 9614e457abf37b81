//! The ONNX ops the importer runs, each as retrograd ops on [`Var`]s (so
//! an imported model is differentiable through the existing backward
//! formulas): one table, [`OPS`], of op type, converter and a check of the
//! node's settings at load.
//!
//! Integer and bool values (shapes, indices, masks) flow as constants; the
//! few ops that compute on them do it on the host (`host.rs`).

mod activation;
mod attention;
mod bitcast;
mod border;
mod cache;
mod cast;
mod causal_conv;
mod control_flow;
mod conv_transpose;
mod deform_conv;
mod det;
mod detection;
mod einsum;
mod elementwise;
mod flex_attention;
mod half;
mod host;
mod indexing;
mod integer;
mod layout;
mod linear_attention;
mod loss;
mod ml;
mod nn;
mod norms;
mod one_hot;
mod pool;
mod quantize;
mod reassemble;
mod recurrent;
mod reduce;
mod resize;
mod roi_align;
mod scan;
mod shape;
mod spectral;
mod subgraph;
mod training;
mod upsample;
mod windows;

pub(crate) use nn::{
    fused_add_layer_norm, fused_attention, fused_conv_relu, fused_matmul_add, FUSED_POOL,
};
pub(crate) use subgraph::{nesting_depth, non_tensor, outer_refs, MAX_DEPTH};

use super::attrs::{bad, Attrs};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::tensor::{DType, Tensor};

/// The most elements an op may make from sizes the model gives ([`Ctx::check_size`]).
const MAX_MADE_ELEMENTS: usize = 1 << 28;

/// What a converter sees of its node.
pub(crate) struct Ctx<'a, 'g> {
    /// The graph the model runs on.
    pub graph: &'g Graph,
    /// The node's attributes (and its label for messages).
    pub attrs: &'a Attrs,
    /// The model's default-domain opset.
    pub opset: i64,
    /// How many outputs the node names.
    pub n_outputs: usize,
    /// The ONNX element type code each input declares, where the model
    /// says it (graph inputs and outputs, `value_info`, initializers, the
    /// outputs of casts): what a value's widened dtype no longer tells, an
    /// `INT8` or a `FLOAT8E4M3FN`. Empty for the importer's fused steps.
    pub input_types: &'a [Option<i32>],
}

/// Computes a node's outputs from its inputs (`None`: an omitted optional input).
pub(crate) type Convert = for<'a, 'g> fn(&Ctx<'a, 'g>, &[Option<Var<'g>>]) -> Result<Vec<Var<'g>>>;

/// Checks a node's attributes at load: `Err(reason)` when a setting is
/// not supported (collected with the unsupported ops).
pub(crate) type Check = fn(&Attrs, i64) -> std::result::Result<(), String>;

/// Every supported op: type, converter, settings check.
pub(crate) const OPS: &[(&str, Convert, Check)] = &[
    // Elementwise.
    ("Add", elementwise::add, ok),
    ("Sub", elementwise::sub, ok),
    ("Mul", elementwise::mul, ok),
    ("Div", elementwise::div, ok),
    ("Pow", elementwise::pow, ok),
    ("Neg", elementwise::neg, ok),
    ("Abs", elementwise::abs, ok),
    ("Exp", elementwise::exp, ok),
    ("Log", elementwise::log, ok),
    ("Sqrt", elementwise::sqrt, ok),
    ("Reciprocal", elementwise::reciprocal, ok),
    ("Tanh", elementwise::tanh, ok),
    ("Sigmoid", elementwise::sigmoid, ok),
    ("Relu", elementwise::relu, ok),
    ("LeakyRelu", elementwise::leaky_relu, ok),
    ("Elu", elementwise::elu, ok),
    ("Softplus", elementwise::softplus, ok),
    ("Sin", elementwise::sin, ok),
    ("Cos", elementwise::cos, ok),
    ("Tan", elementwise::tan, ok),
    ("Asin", elementwise::asin, ok),
    ("Acos", elementwise::acos, ok),
    ("Atan", elementwise::atan, ok),
    ("Sinh", elementwise::sinh, ok),
    ("Cosh", elementwise::cosh, ok),
    ("Asinh", elementwise::asinh, ok),
    ("Acosh", elementwise::acosh, ok),
    ("Atanh", elementwise::atanh, ok),
    ("Floor", elementwise::floor, ok),
    ("Ceil", elementwise::ceil, ok),
    ("Round", elementwise::round, ok),
    ("Sign", elementwise::sign, ok),
    ("Erf", elementwise::erf, ok),
    ("Gelu", elementwise::gelu, elementwise::check_gelu),
    ("Clip", elementwise::clip, ok),
    ("Max", elementwise::max, ok),
    ("Min", elementwise::min, ok),
    ("Sum", elementwise::sum, ok),
    ("Equal", elementwise::equal, ok),
    ("Less", elementwise::less, ok),
    ("LessOrEqual", elementwise::less_or_equal, ok),
    ("Greater", elementwise::greater, ok),
    ("GreaterOrEqual", elementwise::greater_or_equal, ok),
    ("Not", elementwise::not, ok),
    ("And", elementwise::and, ok),
    ("Or", elementwise::or, ok),
    ("Xor", elementwise::xor, ok),
    ("IsNaN", elementwise::is_nan, ok),
    ("Where", elementwise::select, ok),
    ("Mod", integer::modulo, ok),
    ("BitShift", integer::bit_shift, ok),
    ("BitwiseAnd", integer::bitwise_and, ok),
    ("BitwiseOr", integer::bitwise_or, ok),
    ("BitwiseXor", integer::bitwise_xor, ok),
    ("IsInf", activation::is_inf, ok),
    ("Mean", activation::mean, ok),
    // Activations composed of differentiable ops.
    ("HardSigmoid", activation::hard_sigmoid, ok),
    ("HardSwish", activation::hard_swish, ok),
    ("Selu", activation::selu, ok),
    ("Celu", activation::celu, ok),
    ("Mish", activation::mish, ok),
    ("Softsign", activation::softsign, ok),
    ("ThresholdedRelu", activation::thresholded_relu, ok),
    ("Shrink", activation::shrink, ok),
    ("PRelu", activation::prelu, ok),
    ("Swish", activation::swish, ok),
    ("SwiGLU", activation::swiglu, ok),
    ("Cast", cast::cast, cast::check_cast),
    ("CastLike", cast::cast_like, cast::check_cast_like),
    // Shapes and layout.
    ("Identity", shape::identity, ok),
    ("Dropout", shape::dropout, shape::check_dropout),
    ("Constant", shape::constant, shape::check_constant),
    ("Shape", shape::shape, ok),
    ("Size", shape::size, ok),
    ("ConstantOfShape", shape::constant_of_shape, ok),
    ("Range", shape::range, ok),
    ("Reshape", shape::reshape, ok),
    ("Flatten", shape::flatten, ok),
    ("Squeeze", shape::squeeze, ok),
    ("Unsqueeze", shape::unsqueeze, ok),
    ("Transpose", shape::transpose, ok),
    ("Expand", shape::expand, ok),
    ("Concat", shape::concat, ok),
    ("Split", shape::split, ok),
    ("Slice", shape::slice, ok),
    ("Gather", shape::gather, ok),
    ("GatherElements", shape::gather_elements, ok),
    ("Pad", shape::pad, shape::check_pad),
    ("Trilu", shape::trilu, ok),
    ("Tile", layout::tile, ok),
    ("Resize", resize::resize, ok),
    ("GridSample", resize::grid_sample, ok),
    ("AffineGrid", resize::affine_grid, ok),
    ("CenterCropPad", layout::center_crop_pad, ok),
    ("SpaceToDepth", layout::space_to_depth, ok),
    ("DepthToSpace", layout::depth_to_space, ok),
    ("EyeLike", layout::eye_like, ok),
    ("CumSum", layout::cum_sum, ok),
    ("CumProd", layout::cum_prod, ok),
    ("TopK", indexing::top_k, ok),
    ("Hardmax", indexing::hardmax, ok),
    ("GatherND", indexing::gather_nd, ok),
    ("ScatterElements", indexing::scatter_elements, ok),
    ("ScatterND", indexing::scatter_nd, ok),
    ("NonZero", indexing::non_zero, ok),
    ("Compress", indexing::compress, ok),
    ("Unique", indexing::unique, ok),
    ("ReverseSequence", indexing::reverse_sequence, ok),
    // Neural-net ops.
    ("MatMul", nn::matmul, ok),
    ("Gemm", nn::gemm, ok),
    ("Conv", nn::conv, nn::check_conv),
    (
        "ConvTranspose",
        conv_transpose::conv_transpose,
        conv_transpose::check,
    ),
    ("MaxPool", nn::max_pool, nn::check_pool),
    ("AveragePool", nn::average_pool, nn::check_pool),
    ("LpPool", nn::lp_pool, nn::check_pool),
    ("GlobalAveragePool", nn::global_average_pool, ok),
    ("BatchNormalization", nn::batch_norm, nn::check_batch_norm),
    ("LayerNormalization", nn::layer_norm, ok),
    ("Softmax", half::softmax_op, ok),
    ("LogSoftmax", nn::log_softmax, ok),
    ("RMSNormalization", attention::rms_norm, ok),
    ("LpNormalization", loss::lp_normalization, ok),
    ("InstanceNormalization", loss::instance_norm, ok),
    ("GlobalMaxPool", loss::global_max_pool, ok),
    ("NegativeLogLikelihoodLoss", loss::nll_loss, ok),
    ("SoftmaxCrossEntropyLoss", loss::softmax_cross_entropy, ok),
    ("Attention", attention::attention, ok),
    ("RotaryEmbedding", attention::rotary_embedding, ok),
    (
        "CausalConvWithState",
        causal_conv::causal_conv_with_state,
        causal_conv::check,
    ),
    (
        "LinearAttention",
        linear_attention::linear_attention,
        linear_attention::check,
    ),
    (
        "FlexAttention",
        flex_attention::flex_attention,
        flex_attention::check,
    ),
    ("Scan", scan::scan, scan::check),
    ("If", control_flow::if_op, control_flow::check_if),
    ("Loop", control_flow::loop_op, control_flow::check_loop),
    // Reductions.
    ("ReduceSum", reduce::sum, ok),
    ("ReduceMean", reduce::mean, ok),
    ("ReduceMax", reduce::max, ok),
    ("ReduceMin", reduce::min, ok),
    ("ReduceLogSumExp", reduce::logsumexp, ok),
    ("ReduceL1", reduce::l1, ok),
    ("ReduceL2", reduce::l2, ok),
    ("ReduceSumSquare", reduce::sum_square, ok),
    ("ReduceLogSum", reduce::log_sum, ok),
    ("ReduceProd", reduce::prod, ok),
    ("ArgMax", reduce::argmax, ok),
    ("ArgMin", reduce::argmin, ok),
    // Signals, detection, recurrences and the rest.
    ("DFT", spectral::dft, ok),
    ("STFT", spectral::stft, ok),
    ("NonMaxSuppression", detection::non_max_suppression, ok),
    ("RNN", recurrent::rnn, ok),
    ("GRU", recurrent::gru, ok),
    ("LSTM", recurrent::lstm, ok),
    ("Einsum", einsum::einsum, ok),
    // Linear quantization.
    ("QuantizeLinear", quantize::quantize_linear, ok),
    ("DequantizeLinear", quantize::dequantize_linear, ok),
    (
        "DynamicQuantizeLinear",
        quantize::dynamic_quantize_linear,
        ok,
    ),
    ("MatMulInteger", quantize::matmul_integer, ok),
    ("QLinearMatMul", quantize::qlinear_matmul, ok),
    ("BitCast", bitcast::bitcast, ok),
    ("Scatter", indexing::scatter_elements, ok),
    ("GroupNormalization", norms::group_norm, ok),
    ("LRN", norms::lrn, ok),
    ("MeanVarianceNormalization", norms::mean_variance_norm, ok),
    ("Col2Im", reassemble::col2im, ok),
    ("MaxUnpool", reassemble::max_unpool, ok),
    ("BitwiseNot", integer::bitwise_not, ok),
    ("TensorScatter", cache::tensor_scatter, ok),
    ("Upsample", upsample::upsample, ok),
    ("RoiAlign", roi_align::roi_align, ok),
    ("Det", det::det, ok),
    ("HannWindow", windows::hann, ok),
    ("HammingWindow", windows::hamming, ok),
    ("BlackmanWindow", windows::blackman, ok),
    ("MelWeightMatrix", windows::mel_weight_matrix, ok),
    ("OneHot", one_hot::one_hot, ok),
    ("DeformConv", deform_conv::deform_conv, ok),
    ("Adagrad", training::adagrad, ok),
    ("Adam", training::adam, ok),
    ("Momentum", training::momentum, ok),
    ("Binarizer", ml::binarizer, ok),
    ("ArrayFeatureExtractor", ml::array_feature_extractor, ok),
    ("TreeEnsemble", ml::tree_ensemble, ok),
];

/// Ops of the default domain refused by name, with the reason: they have
/// no meaning for a tensor engine, or need values it does not hold.
pub(crate) const REFUSED: &[(&[&str], &str)] = &[
    (
        &[
            "StringNormalizer",
            "StringSplit",
            "StringConcat",
            "RegexFullMatch",
            "TfIdfVectorizer",
        ],
        "it works on strings, which retrograd's tensors do not hold",
    ),
    (
        &["ImageDecoder"],
        "it decodes image files; decode them before the model",
    ),
    (
        &[
            "SequenceAt",
            "SequenceConstruct",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SequenceMap",
            "SplitToSequence",
            "ConcatFromSequence",
            "Optional",
            "OptionalGetElement",
            "OptionalHasElement",
        ],
        "it makes or reads a sequence or an optional value, which the importer does not hold",
    ),
];

/// Why `op_type` is refused by name, if it is.
pub(crate) fn refused(op_type: &str) -> Option<&'static str> {
    REFUSED
        .iter()
        .find(|(ops, _)| ops.contains(&op_type))
        .map(|(_, why)| *why)
}

/// A check that accepts every setting.
fn ok(_: &Attrs, _: i64) -> std::result::Result<(), String> {
    Ok(())
}

/// The entry of op type `op_type`.
pub(crate) fn lookup(op_type: &str) -> Option<(Convert, Check)> {
    OPS.iter()
        .find(|(name, _, _)| *name == op_type)
        .map(|&(_, c, k)| (c, k))
}

impl<'g> Ctx<'_, 'g> {
    /// Required input `i`.
    pub fn input<'v>(&self, inputs: &'v [Option<Var<'g>>], i: usize) -> Result<&'v Var<'g>> {
        inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(&self.attrs.label, format!("input {i} is required")))
    }

    /// Optional input `i`.
    pub fn opt<'v>(&self, inputs: &'v [Option<Var<'g>>], i: usize) -> Option<&'v Var<'g>> {
        inputs.get(i).and_then(Option::as_ref)
    }

    /// The integers an input holds (shapes, axes, pads).
    pub fn ints(&self, v: &Var<'g>) -> Result<Vec<i64>> {
        let t = v.value();
        if t.dtype() != DType::I64 {
            return Err(bad(
                &self.attrs.label,
                format!("expected an int64 input, found {}", t.dtype()),
            ));
        }
        t.to_vec::<i64>()
    }

    /// The number an input holds (a scalar bound, a fill value).
    pub fn scalar(&self, v: &Var<'g>) -> Result<f64> {
        v.value().try_item().map_err(|_| {
            bad(
                &self.attrs.label,
                format!("expected one value, found shape {:?}", v.shape()),
            )
        })
    }

    /// A constant on the node's graph.
    pub fn constant(&self, t: Tensor) -> Var<'g> {
        Var::constant_in(self.graph, t)
    }

    /// The ONNX element type input `i` declares, if the model says it.
    pub fn input_type(&self, i: usize) -> Option<i32> {
        self.input_types.get(i).copied().flatten()
    }

    /// An error naming the node.
    pub fn error(&self, reason: impl std::fmt::Display) -> retrograd_engine::Error {
        bad(&self.attrs.label, reason)
    }

    /// Checks that a tensor of `shape`, sized by the model's data (a
    /// `ConstantOfShape`, a `Range`, an `Expand`), stays under 2^28
    /// elements: a corrupt size must be an error, not an allocation that
    /// aborts the process.
    pub fn check_size(&self, shape: &[usize]) -> Result<()> {
        match shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
            Some(n) if n <= MAX_MADE_ELEMENTS => Ok(()),
            _ => Err(self.error(format!(
                "a tensor of shape {shape:?} is too large to make (over 2^28 elements)"
            ))),
        }
    }

    /// `axis` (negative counts from the end) as an index into rank `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if (0..r.max(1)).contains(&a) {
            Ok(a as usize)
        } else {
            Err(self.error(format!("axis {axis} is out of range for rank {rank}")))
        }
    }
}

/// One output.
pub(crate) fn one<'g>(v: Var<'g>) -> Result<Vec<Var<'g>>> {
    Ok(vec![v])
}
