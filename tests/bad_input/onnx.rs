//! ONNX files that are broken or that the importer does not support, and
//! exports that cannot be written: truncated bytes, garbage, a wrong
//! opset, a cyclic graph, a missing initializer, a weight of the wrong
//! shape, data that does not fit its dims, external data outside the
//! model's folder, unsupported ops (all listed at once), wrong inputs at
//! run time; and an export of an op without an ONNX form, of a graph that
//! does not trace, of foreign or slot-less values. Each is a typed error
//! naming what is at fault.

use prost::Message;
use retrograd::onnx::proto::tensor_proto::DataType;
use retrograd::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
};
use retrograd::onnx::{Exporter, OnnxModel};
use retrograd::{DType, Error, Graph, OnnxProblem, Tensor};

use crate::expect_err;
use crate::harness::{setup, Table};

/// The MLP fixture written by torch.onnx.export (Gemm, Relu, Gemm).
fn mlp() -> ModelProto {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference/onnx/mlp.onnx");
    ModelProto::decode(&std::fs::read(path).expect("the committed fixture")[..])
        .expect("a valid model")
}

fn graph_of(m: &mut ModelProto) -> &mut GraphProto {
    m.graph.as_mut().expect("a graph")
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs.join("_"))),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn load(m: &ModelProto) -> retrograd::Result<OnnxModel> {
    OnnxModel::from_bytes(&m.encode_to_vec())
}

pub fn cases(t: &mut Table) {
    t.add("onnx import: a truncated file", || {
        let bytes = mlp().encode_to_vec();
        for cut in [bytes.len() / 2, bytes.len() - 3, 7] {
            expect_err!(
                OnnxModel::from_bytes(&bytes[..cut]),
                Error::OnnxInvalid {
                    problem: OnnxProblem::Decode,
                    ..
                },
                ["protobuf"]
            )?;
        }
        Ok(())
    });
    t.add("onnx import: garbage and empty bytes", || {
        expect_err!(
            OnnxModel::from_bytes(b"\xff\xff\xff\xff not onnx"),
            Error::OnnxInvalid {
                problem: OnnxProblem::Decode,
                ..
            },
            []
        )?;
        expect_err!(
            OnnxModel::from_bytes(&[]),
            Error::OnnxInvalid {
                problem: OnnxProblem::Decode,
                ..
            },
            ["no graph"]
        )
    });
    t.add("onnx import: a missing file", || {
        expect_err!(
            OnnxModel::load("/nonexistent/model.onnx"),
            Error::Io { .. },
            ["/nonexistent/model.onnx"]
        )
    });
    t.add("onnx import: a wrong opset", || {
        let mut m = mlp();
        m.opset_import = vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(6),
        }];
        expect_err!(
            load(&m),
            Error::OnnxUnsupported { .. },
            ["opset 6", "7 to 28"]
        )?;
        m.opset_import.clear();
        expect_err!(load(&m), Error::OnnxUnsupported { .. }, ["default domain"])
    });
    t.add("onnx import: a cyclic graph", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let out = g.output[0].name().to_string();
        g.node.push(node("Relu", &["loop_b"], &["loop_a"]));
        g.node.push(node("Relu", &["loop_a"], &["loop_b"]));
        g.node.push(node("Add", &["loop_b", "loop_a"], &["loop_c"]));
        let _ = out;
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::Cycle,
                ..
            },
            ["Relu_loop_a", "Relu_loop_b"]
        )
    });
    t.add("onnx import: a missing initializer", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let gone = g.initializer.remove(0);
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::UndefinedValue,
                ..
            },
            [gone.name()]
        )
    });
    t.add("onnx import: a graph output nothing writes", || {
        let mut m = mlp();
        graph_of(&mut m).output[0].name = Some("nowhere".into());
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::UndefinedValue,
                ..
            },
            ["nowhere"]
        )
    });
    t.add("onnx import: a weight of the wrong shape", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let w = g
            .initializer
            .iter_mut()
            .find(|t| t.dims == [32, 64])
            .ok_or("no [32, 64] weight")?;
        // Consistent data for [32, 60]: it decodes, but no longer fits the input.
        w.dims = vec![32, 60];
        w.raw_data = Some(vec![0u8; 32 * 60 * 4]);
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::ShapeMismatch,
                ..
            },
            ["Gemm"]
        )
    });
    t.add("onnx import: data that does not fit its dims", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let name = g.initializer[0].name().to_string();
        g.initializer[0].dims.push(3);
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::BadTensor,
                ..
            },
            [name.as_str(), "raw_data"]
        )?;
        let mut m = mlp();
        graph_of(&mut m).initializer[0].data_type = Some(DataType::String as i32);
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::BadTensor,
                ..
            },
            ["STRING"]
        )
    });
    t.add(
        "onnx import: external data outside the model's folder",
        || {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let mut m = mlp();
            let t0 = &mut graph_of(&mut m).initializer[0];
            t0.raw_data = None;
            t0.data_location =
                Some(retrograd::onnx::proto::tensor_proto::DataLocation::External as i32);
            t0.external_data = vec![StringStringEntryProto {
                key: Some("location".into()),
                value: Some("../secret".into()),
            }];
            let path = dir.path().join("m.onnx");
            std::fs::write(&path, m.encode_to_vec()).map_err(|e| e.to_string())?;
            expect_err!(
                OnnxModel::load(&path),
                Error::OnnxInvalid {
                    problem: OnnxProblem::BadTensor,
                    ..
                },
                ["../secret", "inside"]
            )?;
            // A file that is too short for the data it should hold.
            let t0 = &mut graph_of(&mut m).initializer[0];
            t0.external_data[0].value = Some("weights.bin".into());
            std::fs::write(dir.path().join("weights.bin"), [0u8; 16]).map_err(|e| e.to_string())?;
            std::fs::write(&path, m.encode_to_vec()).map_err(|e| e.to_string())?;
            expect_err!(
                OnnxModel::load(&path),
                Error::OnnxInvalid {
                    problem: OnnxProblem::BadTensor,
                    ..
                },
                ["weights.bin"]
            )
        },
    );
    t.add("onnx import: unsupported ops are listed together", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        for n in g.node.iter_mut().filter(|n| n.op_type() == "Relu") {
            n.op_type = Some("ImageDecoder".into());
        }
        let mut lstm = node("LSTM", &["x"], &["lstm_out"]);
        lstm.domain = Some("com.example".into());
        g.node.push(lstm);
        // A cast to complex numbers: a type no tensor here holds.
        let mut cast = node("Cast", &["x"], &["cast_out"]);
        cast.attribute.push(retrograd::onnx::proto::AttributeProto {
            name: Some("to".into()),
            r#type: Some(2),
            i: Some(14),
            ..Default::default()
        });
        g.node.push(cast);
        expect_err!(
            load(&m),
            Error::OnnxUnsupported { items } if items.len() == 3,
            ["ImageDecoder", "com.example::LSTM", "COMPLEX64"]
        )
    });
    t.add("onnx import: a value defined twice", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let out = g.node[0].output[0].clone();
        g.node.push(node("Relu", &[&out], &[&out]));
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::BadNode,
                ..
            },
            ["defined twice"]
        )
    });
    t.add("onnx import: a node without its required input", || {
        let mut m = mlp();
        let g = graph_of(&mut m);
        let x = g.input[0].name().to_string();
        g.node.push(node("MatMul", &[&x, ""], &["lonely"]));
        g.output.push(retrograd::onnx::proto::ValueInfoProto {
            name: Some("lonely".into()),
            ..Default::default()
        });
        expect_err!(
            load(&m),
            Error::OnnxInvalid {
                problem: OnnxProblem::BadNode,
                ..
            },
            ["MatMul", "input 1"]
        )
    });
    t.add("onnx run: wrong inputs", || {
        let model = setup(load(&mlp()))?;
        let wrong = Tensor::zeros(&[2, 63], DType::F32).map_err(|e| e.to_string())?;
        expect_err!(
            model.infer(&[wrong]),
            Error::OnnxInvalid {
                problem: OnnxProblem::ShapeMismatch,
                ..
            },
            ["[?, 64]", "[2, 63]"]
        )?;
        let ints = Tensor::zeros(&[2, 64], DType::I64).map_err(|e| e.to_string())?;
        expect_err!(
            model.infer(&[ints]),
            Error::OnnxInvalid {
                problem: OnnxProblem::ShapeMismatch,
                ..
            },
            ["f32", "i64"]
        )?;
        expect_err!(
            model.infer(&[]),
            Error::OnnxInvalid {
                problem: OnnxProblem::ShapeMismatch,
                ..
            },
            ["takes 1 inputs"]
        )
    });
    t.add(
        "onnx import: an op making a huge tensor from the file's sizes",
        || {
            let mut m = mlp();
            let g = graph_of(&mut m);
            let shape = TensorProto {
                name: Some("huge_shape".into()),
                dims: vec![2],
                data_type: Some(DataType::Int64 as i32),
                int64_data: vec![1 << 20, 1 << 20],
                ..Default::default()
            };
            g.initializer.push(shape);
            g.node
                .push(node("ConstantOfShape", &["huge_shape"], &["huge"]));
            g.output.push(retrograd::onnx::proto::ValueInfoProto {
                name: Some("huge".into()),
                ..Default::default()
            });
            expect_err!(load(&m), Error::OnnxInvalid { .. }, ["too large"])
        },
    );
    t.add("onnx export: an op without an ONNX form", || {
        let g = Graph::new();
        g.set_tracing(true);
        let x = g.variable(setup(Tensor::randn(&[3, 4], DType::F32, 0))?);
        let y = setup(x.try_cross_entropy(&[0usize, 1, 2]))?;
        expect_err!(Exporter::new(&g).input("x", &x).output("loss", &y).to_bytes(), Error::OnnxExport { op, .. } if op == "cross_entropy", ["cross_entropy", "node 0"])
    });
    t.add("onnx export: a graph that does not trace", || {
        let g = Graph::new();
        let x = g.variable(setup(Tensor::randn(&[3, 4], DType::F32, 0))?);
        let y = x.relu();
        expect_err!(
            Exporter::new(&g).input("x", &x).output("y", &y).to_bytes(),
            Error::InvalidArgument { .. },
            ["set_tracing"]
        )
    });
    t.add(
        "onnx export: values of another graph, and no outputs",
        || {
            let (g, h) = (Graph::new(), Graph::new());
            g.set_tracing(true);
            let x = g.variable(setup(Tensor::randn(&[3], DType::F32, 0))?);
            let other = h
                .variable(setup(Tensor::randn(&[3], DType::F32, 1))?)
                .relu();
            expect_err!(
                Exporter::new(&g)
                    .input("x", &x)
                    .output("y", &other)
                    .to_bytes(),
                Error::ForeignVariable { .. },
                []
            )?;
            expect_err!(
                Exporter::new(&g).input("x", &x).to_bytes(),
                Error::InvalidArgument { .. },
                ["output"]
            )?;
            let y = x.relu();
            expect_err!(
                Exporter::new(&g).input("x", &x).output("x", &y).to_bytes(),
                Error::InvalidArgument { .. },
                ["`x`", "twice"]
            )
        },
    );
    t.add("onnx export: an unwritable path", || {
        let g = Graph::new();
        g.set_tracing(true);
        let x = g.variable(setup(Tensor::randn(&[3], DType::F32, 0))?);
        let y = x.relu();
        expect_err!(
            Exporter::new(&g)
                .input("x", &x)
                .output("y", &y)
                .save("/nonexistent/dir/m.onnx"),
            Error::Io { .. },
            ["/nonexistent/dir/m.onnx"]
        )
    });
}
