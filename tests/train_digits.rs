//! A short training run on the bundled digits reaches at least 95% test
//! accuracy: a small MLP, Adam, a few epochs (seconds in a debug build).
//! Also: the trained model survives a checkpoint round trip bit-exactly.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::data::{digits, Batches};
use retrograd::io::{load_checkpoint, save_checkpoint};
use retrograd::nn::{evaluate_accuracy, Forward, Mlp, Module};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{DType, Graph};

#[test]
fn small_mlp_learns_the_digits_and_round_trips() {
    let data = digits::load_bundled().unwrap();
    let (train, test) = data.stratified_split(0.2, 0).unwrap();
    let mut model = Mlp::builder(&[64, 32, 10]).seed(1).build().unwrap();
    let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(0.005)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut first_loss = None;
    let mut last_loss = 0.0;
    for _epoch in 0..10 {
        for batch in Batches::shuffled(&train, 32, DType::F32, &mut rng).unwrap() {
            let grads = {
                let g = Graph::new();
                let logits = model.forward(&g.constant(batch.features)).unwrap();
                let loss = logits.cross_entropy(&batch.labels);
                last_loss = loss.value().item();
                first_loss.get_or_insert(last_loss);
                loss.backward().unwrap()
            };
            opt.step(&grads).unwrap();
        }
    }
    assert!(last_loss < 0.5 * first_loss.unwrap(), "the loss went down");
    model.set_training(false);
    let acc = evaluate_accuracy(&model, &test, 256, DType::F32).unwrap();
    assert!(acc >= 0.95, "test accuracy {acc}");

    // Checkpoint round trip into a differently initialised model.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("digits.safetensors");
    save_checkpoint(&path, &model, Some(&opt)).unwrap();
    let restored = Mlp::builder(&[64, 32, 10]).seed(99).build().unwrap();
    let mut restored_opt = Adam::new(restored.parameters(), AdamConfig::default().lr(0.5)).unwrap();
    load_checkpoint(&path, &restored, Some(&mut restored_opt)).unwrap();
    assert_eq!(restored.state_dict(), model.state_dict());
    assert_eq!(restored_opt.state_dict(), opt.state_dict());
    assert_eq!(restored_opt.lr(), opt.lr());
    let restored_acc = evaluate_accuracy(&restored, &test, 256, DType::F32).unwrap();
    assert_eq!(restored_acc, acc);
}
