//! The execution engine for target terms: a term is compiled once into a [`Code`] and then run
//! many times. (Placeholder stage: runs the reference evaluator [`super::eval`]; the compiled
//! form replaces it.)

use super::eval::{self, Env};
use super::term::{Term, Var};
use crate::error::Result;
use crate::value::Value;

/// A compiled term with parameters: run it with [`Code::run`].
pub struct Code {
    params: Vec<Var>,
    body: Term,
}

impl Code {
    /// Compiles `body`, whose free variables are among `params`.
    pub fn compile(params: &[Var], body: &Term) -> Code {
        Code {
            params: params.to_vec(),
            body: body.clone(),
        }
    }

    /// Runs the code with the parameters bound to `args` (one per parameter).
    pub fn run(&self, args: &[Value]) -> Result<Value> {
        assert_eq!(args.len(), self.params.len(), "internal error: arity");
        let mut env = Env::new();
        for (p, a) in self.params.iter().zip(args) {
            env.insert(p.id, a.clone());
        }
        eval::eval(&self.body, &env)
    }
}
