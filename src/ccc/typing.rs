//! Type reconstruction: a model whose morphisms are pairs `(domain, codomain)`.
//!
//! Interpreting a combinator here recomputes its type from the objects each generator is given
//! and checks at every composition, pairing and copairing that the pieces fit. It proves the
//! structure traits are generic (a model that is not evaluation) and is an independent check of
//! the types the smart constructors store: `interpret(c, &Typing) == Ok((c.dom, c.cod))`.

use super::model::{Arrays, Cartesian, Category, Closed, Coproducts, Iteration, Primitives};
use super::{Path, Step};
use crate::prim::Prim;
use crate::source::term::Lit;
use crate::types::Type;

/// The type-reconstruction model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Typing;

/// A morphism's domain and codomain.
pub type Sig = (Type, Type);

type R = Result<Sig, String>;

fn same(what: &str, a: &Type, b: &Type) -> Result<(), String> {
    if a == b {
        Ok(())
    } else {
        Err(format!("{what}: {a} does not match {b}"))
    }
}

impl Category for Typing {
    type Mor = Sig;
    type Error = String;

    fn id(&self, a: &Type) -> R {
        Ok((a.clone(), a.clone()))
    }

    fn compose(&self, (b2, c): Sig, (a, b1): Sig) -> R {
        same("composition", &b1, &b2)?;
        Ok((a, c))
    }
}

impl Cartesian for Typing {
    fn bang(&self, a: &Type) -> R {
        Ok((a.clone(), Type::Unit))
    }

    fn fst(&self, a: &Type, b: &Type) -> R {
        Ok((Type::prod(a.clone(), b.clone()), a.clone()))
    }

    fn snd(&self, a: &Type, b: &Type) -> R {
        Ok((Type::prod(a.clone(), b.clone()), b.clone()))
    }

    fn pair(&self, (a1, b): Sig, (a2, c): Sig) -> R {
        same("pairing", &a1, &a2)?;
        Ok((a1, Type::prod(b, c)))
    }

    fn proj(&self, dom: &Type, path: &Path) -> R {
        let mut t = dom.clone();
        for s in path.expanded() {
            let (a, b) = t
                .as_prod()
                .ok_or_else(|| format!("projection from non-product {t}"))?;
            let next = if s == Step::Fst { a.clone() } else { b.clone() };
            t = next;
        }
        Ok((dom.clone(), t))
    }
}

impl Closed for Typing {
    fn curry(&self, (ab, c1): Sig, a: &Type, b: &Type, c: &Type) -> R {
        same("curry domain", &ab, &Type::prod(a.clone(), b.clone()))?;
        same("curry codomain", &c1, c)?;
        Ok((a.clone(), Type::fun(b.clone(), c.clone())))
    }

    fn eval(&self, b: &Type, c: &Type) -> R {
        Ok((
            Type::prod(Type::fun(b.clone(), c.clone()), b.clone()),
            c.clone(),
        ))
    }
}

impl Coproducts for Typing {
    fn inl(&self, a: &Type, b: &Type) -> R {
        Ok((a.clone(), Type::sum(a.clone(), b.clone())))
    }

    fn inr(&self, a: &Type, b: &Type) -> R {
        Ok((b.clone(), Type::sum(a.clone(), b.clone())))
    }

    fn copair(&self, (a1, c1): Sig, (b1, c2): Sig, a: &Type, b: &Type, c: &Type) -> R {
        same("copair left", &a1, a)?;
        same("copair right", &b1, b)?;
        same("copair codomain", &c1, c)?;
        same("copair codomain", &c2, c)?;
        Ok((Type::sum(a.clone(), b.clone()), c.clone()))
    }

    fn dist(&self, a: &Type, b: &Type, c: &Type) -> R {
        Ok((
            Type::prod(a.clone(), Type::sum(b.clone(), c.clone())),
            Type::sum(
                Type::prod(a.clone(), b.clone()),
                Type::prod(a.clone(), c.clone()),
            ),
        ))
    }
}

impl Arrays for Typing {
    fn map(&self, (d, b1): Sig, g: &Type, a: &Type, b: &Type) -> R {
        same("map function domain", &d, &Type::prod(g.clone(), a.clone()))?;
        same("map function codomain", &b1, b)?;
        Ok((
            Type::prod(g.clone(), Type::array(a.clone())),
            Type::array(b.clone()),
        ))
    }

    fn map2(&self, (d, c1): Sig, g: &Type, a: &Type, b: &Type, c: &Type) -> R {
        same(
            "map2 function domain",
            &d,
            &Type::prod(g.clone(), Type::prod(a.clone(), b.clone())),
        )?;
        same("map2 function codomain", &c1, c)?;
        Ok((
            Type::prod(
                g.clone(),
                Type::prod(Type::array(a.clone()), Type::array(b.clone())),
            ),
            Type::array(c.clone()),
        ))
    }

    fn build(&self, (d, a1): Sig, g: &Type, a: &Type) -> R {
        same(
            "build function domain",
            &d,
            &Type::prod(g.clone(), Type::Int),
        )?;
        same("build function codomain", &a1, a)?;
        Ok((Type::prod(g.clone(), Type::Int), Type::array(a.clone())))
    }

    fn index(&self, a: &Type) -> R {
        Ok((Type::prod(Type::array(a.clone()), Type::Int), a.clone()))
    }

    fn length(&self, a: &Type) -> R {
        Ok((Type::array(a.clone()), Type::Int))
    }

    fn replicate(&self, a: &Type) -> R {
        Ok((Type::prod(Type::Int, a.clone()), Type::array(a.clone())))
    }

    fn array(&self, a: &Type, n: usize) -> R {
        Ok((Type::tuple(&vec![a.clone(); n]), Type::array(a.clone())))
    }
}

impl Iteration for Typing {
    fn iter(&self, (d, s): Sig, g: &Type, a: &Type, b: &Type) -> R {
        same("it function domain", &d, &Type::prod(g.clone(), a.clone()))?;
        same("it function codomain", &s, &Type::sum(a.clone(), b.clone()))?;
        Ok((Type::prod(g.clone(), a.clone()), b.clone()))
    }

    fn iter_tape(&self, (d, s): Sig, g: &Type, a: &Type, b: &Type, c: &Type) -> R {
        same(
            "itTape function domain",
            &d,
            &Type::prod(g.clone(), a.clone()),
        )?;
        let next = Type::sum(a.clone(), b.clone());
        same("itTape function codomain", &s, &Type::prod(next, c.clone()))?;
        let cod = Type::prod(b.clone(), Type::array(c.clone()));
        Ok((Type::prod(g.clone(), a.clone()), cod))
    }

    fn fix(&self, (d, s): Sig, z: &Type, b: &Type, _: crate::error::Span) -> R {
        let zb = Type::fun(z.clone(), b.clone());
        same("fix function domain", &d, &Type::prod(zb, z.clone()))?;
        same("fix function codomain", &s, b)?;
        Ok((z.clone(), b.clone()))
    }
}

impl Primitives for Typing {
    fn constant(&self, lit: &Lit) -> R {
        Ok((Type::Unit, lit.ty()))
    }

    fn prim(&self, op: &Prim) -> R {
        Ok((op.domain(), op.result().clone()))
    }
}
