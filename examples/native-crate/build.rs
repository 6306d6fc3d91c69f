fn main() {
    // Writes $OUT_DIR/model.rs (the primal, `_jvp`, `_vjp` and `_grad` of every definition)
    // and asks Cargo to rerun when model.chad changes. A chad error (syntax, types) is
    // printed with its source position.
    if let Err(e) = chad::build::compile("model.chad") {
        panic!("{e}");
    }
}
