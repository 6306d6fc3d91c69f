//! The execution engine for target terms: a term is compiled once into a [`Code`], a tree of
//! Rust closures over *slot-indexed frames*, and then run many times.
//!
//! The reference evaluator ([`super::eval`]) walks the term and looks every variable up by name
//! in a persistent map. The engine does the name resolution once, at compile time:
//!
//! * **Frames.** Every function body (a `λ`, a linear `λ̲`, a power `\b -> l`, or the whole
//!   term) gets a frame, a `Vec<Value>` with one slot per variable bound in it (variables have
//!   unique identities, so slots are never shared). A variable is read as `frame[slot]`.
//! * **Closures** copy exactly the variables their body uses from the enclosing frame (their
//!   *captures*, found while compiling the body) into a small vector; applying one makes a
//!   frame of the body's size, fills in captures and argument, and runs the body.
//! * **Let chains** run as a loop over compiled bindings (a 10⁴-line program recurses no
//!   deeper than one line), and pattern bindings are precompiled.
//! * **Loops** (`loop f x`, `loopTape f x` with `f = \s -> body`) run the step's body in the
//!   current frame, its parameter in a slot, in a Rust loop ([`crate::steps::run_loop`]): no
//!   closure call and no Rust recursion per iteration; `lchain`/`lchainRev` apply the recorded
//!   step derivatives in a Rust loop too ([`crate::steps::chain`]).
//! * **Array loops are inlined**: `map (\x -> e) xs`, `map2 (\x y -> e) xs ys`,
//!   `build n (\i -> e)` and the linear `lbuild n (\i -> l)` bind the element in the current
//!   frame and run the body in a loop, with no closure allocated or called per element.
//! * **Unboxed scalars.** Terms of type Real, Int or Bool in positions that need the number
//!   (a [`Scalar`] primitive's operands, a scale factor, an index, a condition, the body of a
//!   fused sum) are compiled to closures returning `f64`/`i64`/`bool`: literals, variables,
//!   places and scalar primitives build no [`Value`]. Linear terms of type Real (known from the
//!   linear variables' types) run as `Option<f64>` (`None` is zero), whose `+` and scaling are
//!   exactly [`Lin::plus`] and [`Lin::scale`] on the two forms a linear real takes.
//! * **Flat scalar runs.** Consecutive let bindings of scalar work (a real variable bound to
//!   a tree of real primitives over literals, variables and places; in a linear chain, a
//!   linear real bound to a tree of `0`, `+`, scaling and variables) compile to one vector of
//!   24-byte instructions over two register files, run by one loop (`engine/flat.rs`), instead of a
//!   tree of boxed closures per binding: a long straight-line derivative's code stays a few
//!   times smaller and contiguous, so its time per line does not step up when it outgrows the
//!   cache. A variable used only inside its run lives in a register, never in the frame.
//! * **Places.** A variable under projections and indexing (`snd (rs ! i)`, `snd x ! i`) is
//!   read by reference along the path: only the value at the end is copied, and a pattern
//!   `let (a, b) = place` copies only the leaves it binds. Indices are evaluated before the
//!   walk; if one fails, the path before it is walked first so that an earlier out-of-range
//!   error wins, as in the reference evaluator's order. *Linear places* (a linear variable
//!   under `fst`/`snd`, possibly indexed: the tangent `snd (fst (fst d))` of a captured scalar,
//!   read per element of a loop) are walked by reference too ([`Lin::fst_ref`]), unless the
//!   variable is read for the last time (then it is moved, so accumulators stay unique).
//! * **Fused sums.** `sum (map (\x -> e) xs)` and `sum (build n (\i -> e))` add the elements
//!   as they are computed (the primitive's fold: from `0.0`, in order), with no array.
//! * **Unzipped arrays of tuples.** `let rs = build n (\i -> .. (a, (b, c)))` (or a `map`)
//!   whose every use in its scope takes an element apart, asks for the length or maps a leaf
//!   out (`map (\r -> fst r) rs`) is stored as one array per leaf of the tuple (a *column*,
//!   with a slot of its own, captured by closures like any variable): the loop allocates no
//!   pairs, `snd (rs ! i)` reads leaves from columns, and a tuple node is rebuilt only where a
//!   use needs it as a value. Any other use keeps the array zipped.
//! * **Linear accumulation.** `lsum (lbuild n (\i -> l))` where `l` is built from pairs or
//!   one-hots (a tree of `+`, `let`, `let lin` and linear pairs) keeps one accumulator per
//!   leaf of the pair structure (`LShape`): a one-hot `onehot m j x` is added at `j` in
//!   place ([`Lin::add_one_hot_in_place`]; no array is allocated per element), and a leaf with
//!   no one-hot gets the leaf's value computed exactly as [`Lin::plus`] on whole values would
//!   (a `+` over pairs adds leafwise through scratch slots), then added in. Errors come in the
//!   reference evaluator's order. The only difference is where two one-hots of one element hit
//!   the same index: their contributions are added into the accumulator one by one, which the
//!   reference evaluator itself does or not depending on its sparse/dense representation.
//!   A sum nested in such a body (`.. + lsum (lbuild m (\j -> ..))`: a triangular loop's row)
//!   adds its elements into the same accumulators (a flat loop when its body is flat
//!   one-hots; where a leaf is stored rather than added, into its slot from zero), and a body ending in `let lin v = e in ((0, fst v), snd v)` (a tuple of
//!   projections placing each leaf of `v` once) computes `e` straight into the positions the
//!   tuple puts its leaves in, so neither the nested sum nor `v` is ever built.
//! * **Unzipped linear arrays.** `let lin cs = lbuild n (\i -> (.., ..))` whose every use
//!   sums it (`fst (lsum cs)`), indexes it or maps a leaf out (`lmap (\p ⊸ snd p) cs`) is
//!   stored as one linear array per leaf (no pair per element; a leaf that is always `0`
//!   stores nothing); `lbuild` of linear reals builds its unboxed array directly. A leaf that
//!   every use only sums is kept as its running sum: each element's leaf adds into one
//!   accumulator (and a sum nested in the element adds straight into it), so no column of
//!   per-element values is built (GMM's per-point cotangent of the whole environment).
//! * **Flat loops.** `lsum (lbuild n (\i -> body))` and an unzipped `let lin cs = lbuild ..`
//!   whose body is a chain of flat bindings ending in a tuple of flat linear reals run as one
//!   flat run (`flat::FlatLoop`): loop-invariant reads (variables bound outside, their
//!   index-free places) are hoisted before the loop, elements at the loop's index of arrays
//!   bound outside are read from the array resolved once, and each leaf of the tuple is summed
//!   in a register or pushed onto an unboxed column (a column only ever summed is kept as its
//!   running sum). Integer lets (`let i_1 = i + 1`, a packed triangular index) live in integer
//!   registers (and their slots), elements at computed indices are read from the resolved
//!   array, and a summed leaf that is a sum of one-hots `onehot n k v` adds `v` at `k` into a
//!   dense accumulator; a lone sum of one-hots outside any loop (the index chain's gradient)
//!   runs the same way, as a loop of one element. A lone real expression of 32 nodes or more
//!   without lets is a flat run of its own, like a linear one.
//! * **Moves.** A variable used exactly once, not inside a loop or closure body relative to its
//!   binding, is moved out of its slot rather than copied, so a uniquely owned linear value
//!   (a sparse cotangent accumulator) stays uniquely owned and [`Lin::plus`] can update it in
//!   place instead of copying it.
//!
//! Values, linear values, linear maps and copowers are those of [`crate::value`] and
//! [`super::linear`]; the engine sees linear values only through the `linear` API. Its
//! semantics is the reference evaluator's, including errors and their source positions (tests
//! compare the two on random terms, and every AD oracle test runs through the engine).

use super::linear::{Copower, Lin, LinFun, LinearMap};
use super::term::{Child, LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use super::types::{LTy, Ty};
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Prim, Scalar};
use crate::value::{self, Closure, SumOrder, Value};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::rc::Rc;

mod flat;

/// A frame: one slot per variable bound in a function body.
type Frame = Vec<Value>;
/// A compiled Cartesian term.
type CFn = Box<dyn Fn(&mut Frame) -> Result<Value>>;
/// Compiled code computing an `R`.
type Compiled<R> = Box<dyn Fn(&mut Frame) -> Result<R>>;
/// A compiled term of type Int, giving the integer.
type IFn = Box<dyn Fn(&mut Frame) -> Result<i64>>;
/// A compiled linear term.
type LFn = Box<dyn Fn(&mut Frame) -> Result<Lin>>;
/// A compiled term of type Real, giving the number unboxed.
type RFn = Box<dyn Fn(&mut Frame) -> Result<f64>>;
/// A compiled linear term of type Real: `None` for zero, so that the arithmetic is exactly
/// [`Lin::plus`]'s and [`Lin::scale`]'s on the two forms a linear real takes.
type LRFn = Box<dyn Fn(&mut Frame) -> Result<Option<f64>>>;
/// A compiled term of type Bool, giving the boolean.
type BFn = Box<dyn Fn(&mut Frame) -> Result<bool>>;

/// A compiled term with parameters: run it with [`Code::run`].
pub struct Code {
    size: usize,
    params: Vec<usize>,
    body: CFn,
}

impl Code {
    /// Compiles `body`, whose free variables are among `params`.
    pub fn compile(params: &[Var], body: &Term) -> Code {
        let mut c = Compiler::new(body);
        c.funs.push(Fun::default());
        let params = params.iter().map(|p| c.bind(p)).collect();
        let body = c.term(body);
        let top = c.funs.pop().expect("the top frame");
        assert!(
            top.captures.is_empty(),
            "internal error: free variables {:?} not among the parameters",
            top.captures
        );
        Code {
            size: top.size,
            params,
            body,
        }
    }

    /// Runs the code with the parameters bound to `args` (one per parameter).
    pub fn run(&self, args: &[Value]) -> Result<Value> {
        assert_eq!(args.len(), self.params.len(), "internal error: arity");
        with_frame(self.size, &[], &[], |frame| {
            for (&s, a) in self.params.iter().zip(args) {
                frame[s] = a.clone();
            }
            deep(|| (self.body)(frame))
        })
    }
}

/// A function body being compiled: its slots and the variables it captures.
#[derive(Default)]
struct Fun {
    slots: FxHashMap<VarId, usize>,
    size: usize,
    /// Captured variables and their slots in this frame, in order of first use.
    captures: Vec<(VarId, usize)>,
    /// Loop nesting inside this function at the current point, and at each binding.
    loops: u32,
    bound_at: FxHashMap<VarId, u32>,
}

struct Compiler {
    funs: Vec<Fun>,
    /// How often each variable occurs in the whole term.
    uses: FxHashMap<VarId, u32>,
    /// Arrays of tuples stored as one array per component (see [`Compiler::unzip`]).
    unzipped: FxHashMap<VarId, Rc<Shape>>,
    /// Linear arrays stored as one linear array per leaf (see [`Compiler::lin_unzip`]).
    lin_unzipped: FxHashMap<VarId, LinCols>,
    /// How deep the term being compiled is nested (see [`Compiler::nested`]).
    nest: u32,
}

/// Every this many levels of nesting, compiled code checks the stack when it runs.
const RUN_CHECK: u32 = 16;

impl Compiler {
    fn new(t: &Term) -> Compiler {
        let mut uses = FxHashMap::default();
        count_uses(super::term::Child::C(t), &mut uses);
        Compiler {
            funs: Vec::new(),
            uses,
            unzipped: FxHashMap::default(),
            lin_unzipped: FxHashMap::default(),
            nest: 0,
        }
    }

    /// Compiles a subterm with `f` under [`deep`]. The compiled code of a term calls its
    /// subterms' code, so running it recurses as deep as the term is nested: every
    /// [`RUN_CHECK`]th level of nesting runs under [`deep`] too (the levels in between use a
    /// bounded amount of stack, well within `deep`'s red zone, and pay nothing).
    fn nested<R: 'static>(&mut self, f: impl FnOnce(&mut Compiler) -> Compiled<R>) -> Compiled<R> {
        self.nest += 1;
        let code = deep(|| f(self));
        self.nest -= 1;
        if self.nest % RUN_CHECK == 0 {
            // (Dropped under `deep` too: the code is a tree of closures as deep as the term.)
            let code = crate::deep::Deep::new(code);
            Box::new(move |fr| deep(|| code(fr)))
        } else {
            code
        }
    }

    fn top(&mut self) -> &mut Fun {
        self.funs.last_mut().expect("a function scope")
    }

    /// A slot for a variable bound in the current function.
    fn bind(&mut self, x: &Var) -> usize {
        self.bind_id(x.id)
    }

    fn bind_id(&mut self, id: VarId) -> usize {
        let f = self.top();
        let s = f.size;
        f.size += 1;
        f.slots.insert(id, s);
        let depth = f.loops;
        f.bound_at.insert(id, depth);
        s
    }

    /// The slot of a variable in function `depth`, capturing it from outer functions as needed.
    fn slot_in(&mut self, id: VarId, depth: usize) -> usize {
        if let Some(&s) = self.funs[depth].slots.get(&id) {
            return s;
        }
        assert!(
            depth > 0,
            "internal error: unbound target variable #{}",
            id.0
        );
        let f = &mut self.funs[depth];
        let s = f.size;
        f.size += 1;
        f.slots.insert(id, s);
        f.captures.push((id, s));
        s
    }

    /// How to read variable `x` here: its slot, and whether this is its only use, outside any
    /// loop or closure entered since its binding (then the value can be moved out).
    fn read(&mut self, x: &Var) -> (usize, bool) {
        self.read_id(x.id)
    }

    fn read_id(&mut self, id: VarId) -> (usize, bool) {
        let depth = self.funs.len() - 1;
        let local = self.funs[depth].slots.contains_key(&id);
        let s = self.slot_in(id, depth);
        let f = &self.funs[depth];
        let once = self.uses.get(&id).copied() == Some(1);
        let movable = local && once && f.bound_at.get(&id) == Some(&f.loops);
        (s, movable)
    }

    /// Compiles a function body in a new frame with the given parameters; returns the frame
    /// size, the parameters' slots, the body, and the captures as (slot in the body's frame,
    /// slot in the enclosing frame).
    fn function<T>(
        &mut self,
        params: &[&Var],
        body: impl FnOnce(&mut Compiler) -> T,
    ) -> (usize, Vec<usize>, T, Vec<(usize, usize)>) {
        self.funs.push(Fun::default());
        let ps = params.iter().map(|p| self.bind(p)).collect();
        let b = body(self);
        let f = self.funs.pop().expect("the function's scope");
        let depth = self.funs.len() - 1;
        let caps = f
            .captures
            .iter()
            .map(|&(id, inner)| (inner, self.slot_in(id, depth)))
            .collect();
        (f.size, ps, b, caps)
    }

    /// Compiles `body` as the body of a loop in the current frame.
    fn in_loop<T>(&mut self, body: impl FnOnce(&mut Compiler) -> T) -> T {
        self.top().loops += 1;
        let out = body(self);
        self.top().loops -= 1;
        out
    }

    fn pat(&mut self, p: &Pat) -> PatCode {
        match p {
            Pat::Var(x) => PatCode::Slot(self.bind(x)),
            Pat::Wild(_) => PatCode::Wild,
            Pat::Pair(a, b) => PatCode::Pair(Box::new(self.pat(a)), Box::new(self.pat(b))),
        }
    }

    fn term(&mut self, t: &Term) -> CFn {
        self.nested(|c| c.term_node(t))
    }

    /// Compiles `t` as a [`Place`] if it is a variable under at least `min` projections and
    /// indexings.
    fn place(&mut self, t: &Term, min: usize) -> Option<Place> {
        let mut chain = Vec::new();
        let mut cur = t;
        let root = loop {
            match &cur.kind {
                TermKind::Fst(e) | TermKind::Snd(e) | TermKind::Index(e, _) => {
                    chain.push(cur);
                    cur = e;
                }
                TermKind::Var(x) => break x,
                _ => return None,
            }
        };
        if self.unzipped.contains_key(&root.id) {
            return match self.column_chain(t)? {
                ColChain::Leaf(p) => Some(p),
                ColChain::Node(_) => None,
            };
        }
        if chain.len() < min {
            return None;
        }
        // Never moved out: the value stays in its slot.
        let (root, _) = self.read(root);
        let mut steps = Vec::with_capacity(chain.len());
        let mut indices = 0;
        for node in chain.into_iter().rev() {
            steps.push(match &node.kind {
                TermKind::Fst(_) => PStep::Fst,
                TermKind::Snd(_) => PStep::Snd,
                TermKind::Index(_, i) => {
                    indices += 1;
                    PStep::Index(self.int(i), node.span)
                }
                _ => unreachable!("a place step"),
            });
        }
        Some(Place {
            root,
            steps,
            indices,
        })
    }

    /// A `let` binding of `p` to `e`, whose scope is `scope`.
    fn binding(&mut self, p: &Pat, e: &Term, scope: Child<'_>) -> Bind {
        if let Pat::Var(x) = p {
            if let Some(b) = self.unzip(x, e, scope) {
                return b;
            }
        }
        if let Some(site) = self.column_node(e) {
            let p = self.pat(p);
            return Bind::Columns(p, site);
        }
        if let Pat::Pair(..) = p {
            // A variable bound once can be moved out and its pair taken apart in place;
            // otherwise read the leaves by reference.
            let movable = matches!(&e.kind, TermKind::Var(x) if self.movable(x));
            if !movable {
                if let Some(place) = self.place(e, 0) {
                    return Bind::Place(self.pat(p), place);
                }
            }
        }
        let e = self.term(e);
        Bind::Value(self.pat(p), e)
    }

    /// Whether reading `x` here would move it out of its slot (see [`Compiler::read`]),
    /// without registering the read.
    fn movable(&self, x: &Var) -> bool {
        let f = self.funs.last().expect("a function scope");
        f.slots.contains_key(&x.id)
            && self.uses.get(&x.id).copied() == Some(1)
            && f.bound_at.get(&x.id) == Some(&f.loops)
    }

    /// `let xs = build n (\i -> .. (a, (b, c)))` (or `map (\x -> ..) ys`) whose every use in
    /// `scope` takes an element apart (`snd (xs ! i)`, `let (a, b) = xs ! i`), asks for the
    /// length, or maps a component out (`map (\r -> fst r) xs`): the array is stored
    /// *unzipped*, one array per leaf of the tuple (a column, in a slot of its own), so the loop
    /// allocates no pairs and a use reads the leaves it needs from their columns. Every use of
    /// `xs` is then compiled through [`Compiler::column_chain`] or [`Compiler::column_map`];
    /// when some other use would need the whole array, it is built as usual.
    fn unzip(&mut self, x: &Var, e: &Term, scope: Child<'_>) -> Option<Bind> {
        use TermKind as K;
        let (src, f) = match &e.kind {
            K::Build(n, f) => (Ok(n), f),
            K::Map(f, xs) => (Err(xs), f),
            _ => return None,
        };
        let K::Lam(i, body) = &f.kind else {
            return None;
        };
        let mut tail = body;
        while is_let(tail) {
            tail = match &tail.kind {
                K::Let(_, _, b) => b,
                K::App(f, _) => match &f.kind {
                    K::Lam(_, b) => b,
                    _ => unreachable!("a let"),
                },
                _ => unreachable!("a let"),
            };
        }
        if !matches!(tail.kind, K::Pair(..)) {
            return None;
        }
        let mut leaves = Vec::new();
        let shape = Rc::new(shape_of(tail, &mut leaves));
        if !columns_suffice(x.id, &shape, scope) {
            return None;
        }
        let src = match src {
            Ok(n) => UnzipSrc::Build(self.int(n), e.span),
            Err(xs) => UnzipSrc::Map(self.term(xs)),
        };
        let (var, steps, leaves) = self.in_loop(|c| {
            let var = c.bind(i);
            let (steps, _) = c.let_chain(body);
            let leaves: Vec<CFn> = leaves.iter().map(|t| c.term(t)).collect();
            (var, steps, leaves)
        });
        let mut ids = Vec::new();
        shape.ids(&mut ids);
        let cols = ids.into_iter().map(|id| self.bind_id(id)).collect();
        self.unzipped.insert(x.id, shape);
        Some(Bind::Unzip(Box::new(Unzip {
            src,
            var,
            steps,
            leaves,
            cols,
        })))
    }

    /// A chain of projections and indexings over `xs ! j` for an unzipped `xs`: a place in
    /// the column of the leaf it reaches, or the tuple node it stops at.
    fn column_chain(&mut self, t: &Term) -> Option<ColChain> {
        let mut chain = Vec::new();
        let mut cur = t;
        let root = loop {
            match &cur.kind {
                TermKind::Fst(e) | TermKind::Snd(e) | TermKind::Index(e, _) => {
                    chain.push(cur);
                    cur = e;
                }
                TermKind::Var(x) => break x,
                _ => return None,
            }
        };
        let shape = self.unzipped.get(&root.id)?.clone();
        chain.reverse();
        let (first, rest) = chain.split_first()?;
        let TermKind::Index(_, j) = &first.kind else {
            return None;
        };
        let mut node = &*shape;
        let mut used = 0;
        for step in rest {
            match (node, &step.kind) {
                (Shape::Pair(a, _), TermKind::Fst(_)) => node = a,
                (Shape::Pair(_, b), TermKind::Snd(_)) => node = b,
                _ => break,
            }
            used += 1;
        }
        let j = self.int(j);
        let span = first.span;
        match node {
            Shape::Leaf(col) => {
                let (root, _) = self.read_id(*col);
                let mut steps = vec![PStep::Index(j, span)];
                let mut indices = 1;
                for step in &rest[used..] {
                    steps.push(match &step.kind {
                        TermKind::Fst(_) => PStep::Fst,
                        TermKind::Snd(_) => PStep::Snd,
                        TermKind::Index(_, i) => {
                            indices += 1;
                            PStep::Index(self.int(i), step.span)
                        }
                        _ => unreachable!("a place step"),
                    });
                }
                Some(ColChain::Leaf(Place {
                    root,
                    steps,
                    indices,
                }))
            }
            Shape::Pair(..) => {
                debug_assert_eq!(used, rest.len());
                let node = self.rt_shape(node);
                let (len, _) = self.read_id(shape.first());
                Some(ColChain::Node(ColSite { j, span, len, node }))
            }
        }
    }

    /// [`Compiler::column_chain`] when it stops at a tuple node (the caller builds it, or
    /// matches a pattern against it).
    fn column_node(&mut self, t: &Term) -> Option<ColSite> {
        if !self.reaches_node(t) {
            return None;
        }
        match self.column_chain(t)? {
            ColChain::Node(site) => Some(site),
            ColChain::Leaf(_) => unreachable!("checked to reach a node"),
        }
    }

    /// Whether `t` is a chain over `xs ! j` for an unzipped `xs` that stops at a tuple node
    /// (without compiling anything).
    fn reaches_node(&self, t: &Term) -> bool {
        let mut chain = Vec::new();
        let mut cur = t;
        let root = loop {
            match &cur.kind {
                TermKind::Fst(e) | TermKind::Snd(e) | TermKind::Index(e, _) => {
                    chain.push(cur);
                    cur = e;
                }
                TermKind::Var(x) => break x,
                _ => return false,
            }
        };
        let Some(shape) = self.unzipped.get(&root.id) else {
            return false;
        };
        let mut node = &**shape;
        for step in chain.iter().rev().skip(1) {
            match (node, &step.kind) {
                (Shape::Pair(a, _), TermKind::Fst(_)) => node = a,
                (Shape::Pair(_, b), TermKind::Snd(_)) => node = b,
                _ => return false,
            }
        }
        matches!(node, Shape::Pair(..))
    }

    /// The column slots of a tuple node, here.
    fn rt_shape(&mut self, s: &Shape) -> RtShape {
        match s {
            Shape::Leaf(id) => RtShape::Leaf(self.read_id(*id).0),
            Shape::Pair(a, b) => {
                RtShape::Pair(Box::new(self.rt_shape(a)), Box::new(self.rt_shape(b)))
            }
        }
    }

    /// `map (\r -> fst (snd r)) xs` for an unzipped `xs`, the projections reaching a leaf:
    /// that leaf's column.
    fn column_map(&mut self, f: &Term, xs: &Term) -> Option<CFn> {
        let TermKind::Var(x) = &xs.kind else {
            return None;
        };
        let shape = self.unzipped.get(&x.id)?.clone();
        let TermKind::Lam(r, body) = &f.kind else {
            return None;
        };
        let col = leaf_of_projection(&shape, r, body)?;
        let (s, _) = self.read_id(col);
        Some(Box::new(move |fr| Ok(fr[s].clone())))
    }

    /// A let chain: its bindings (compiled in order) and its body (not compiled).
    fn let_chain<'t>(&mut self, mut t: &'t Term) -> (Vec<Bind>, &'t Term) {
        let mut steps = Vec::new();
        loop {
            let (run, rest) = flat::run_of_term(t);
            if flat::worth(&run) {
                steps.push(Bind::Flat(Box::new(self.flat(&run))));
                t = rest;
                continue;
            }
            match &t.kind {
                TermKind::Let(p, e, b) => {
                    steps.push(self.binding(p, e, Child::C(b)));
                    t = b;
                }
                TermKind::App(f, a) if matches!(f.kind, TermKind::Lam(..)) => {
                    // (\x -> b) a: a let.
                    let TermKind::Lam(x, b) = &f.kind else {
                        unreachable!()
                    };
                    steps.push(self.binding(&Pat::Var(x.clone()), a, Child::C(b)));
                    t = b;
                }
                _ => return (steps, t),
            }
        }
    }

    /// A term of type Real, compiled to give the number unboxed: literals, variables, places
    /// and scalar primitives (and lets and conditionals around them) build no [`Value`].
    fn real(&mut self, t: &Term) -> RFn {
        self.nested(|c| c.real_node(t))
    }

    fn real_node(&mut self, t: &Term) -> RFn {
        use TermKind as K;
        match &t.kind {
            K::Lit(l) => {
                if let Value::Real(x) = l.value() {
                    return Box::new(move |_| Ok(x));
                }
            }
            K::Var(x) => {
                let (s, _) = self.read(x);
                return Box::new(move |fr| Ok(fr[s].expect_real()));
            }
            K::Fst(_) | K::Snd(_) | K::Index(..) => {
                if let Some(p) = self.place(t, 1) {
                    return Box::new(move |fr| p.read(fr, |g| g.real()));
                }
            }
            K::Prim(op, args) => {
                if let Some(r) = self.real_prim(op, args) {
                    return r;
                }
            }
            K::Let(..) | K::App(..) if is_let(t) => {
                let (steps, body) = self.let_chain(t);
                let body = self.real(body);
                return Box::new(move |fr| {
                    for b in &steps {
                        b.run(fr)?;
                    }
                    body(fr)
                });
            }
            K::If(c, a, b) => {
                let c = self.boolean(c);
                let a = self.real(a);
                let b = self.real(b);
                return Box::new(move |fr| if c(fr)? { a(fr) } else { b(fr) });
            }
            _ => {}
        }
        let t = self.term(t);
        Box::new(move |fr| Ok(t(fr)?.expect_real()))
    }

    /// A scalar primitive on reals, unboxed.
    fn real_prim(&mut self, op: &Prim, args: &[Term]) -> Option<RFn> {
        match (op.scalar(), args.len()) {
            (Some(Scalar::Real1(f)), 1) => {
                let a = self.real(&args[0]);
                Some(Box::new(move |fr| Ok(f(a(fr)?))))
            }
            (Some(Scalar::Real2(f)), 2) => {
                let a = self.real(&args[0]);
                let b = self.real(&args[1]);
                Some(Box::new(move |fr| {
                    let x = a(fr)?;
                    Ok(f(x, b(fr)?))
                }))
            }
            _ => None,
        }
    }

    /// `case e of inl p -> a | inr q -> b`, the branches compiled by `branch(self, left)` in
    /// the scope of their patterns. A test `decide c` whose patterns bind nothing (an `if`) is
    /// compiled as a test of the unboxed Boolean `c`, without building the sum.
    fn case<R: 'static>(
        &mut self,
        e: &Term,
        p: &Pat,
        q: &Pat,
        mut branch: impl FnMut(&mut Compiler, bool) -> Compiled<R>,
    ) -> Compiled<R> {
        if let TermKind::Prim(op, args) = &e.kind
            && op.name() == "decide"
            && let [c] = args.as_slice()
            && matches!((p, q), (Pat::Wild(_), Pat::Wild(_)))
        {
            let c = self.boolean(c);
            let (a, b) = (branch(self, true), branch(self, false));
            return Box::new(move |fr| if c(fr)? { a(fr) } else { b(fr) });
        }
        let (e, p) = (self.term(e), self.pat(p));
        let a = branch(self, true);
        let q = self.pat(q);
        let b = branch(self, false);
        case_of(e, p, a, q, b)
    }

    /// A term of type Bool, compiled to give the boolean.
    fn boolean(&mut self, t: &Term) -> BFn {
        if let TermKind::Prim(op, args) = &t.kind {
            if let Some(b) = self.bool_prim(op, args) {
                return b;
            }
        }
        let t = self.term(t);
        Box::new(move |fr| Ok(t(fr)?.expect_bool()))
    }

    /// A comparison, on unboxed operands.
    fn bool_prim(&mut self, op: &Prim, args: &[Term]) -> Option<BFn> {
        {
            match (op.scalar(), args.len()) {
                (Some(Scalar::RealCmp(f)), 2) => {
                    let a = self.real(&args[0]);
                    let b = self.real(&args[1]);
                    Some(Box::new(move |fr| {
                        let x = a(fr)?;
                        Ok(f(&x, &b(fr)?))
                    }))
                }
                (Some(Scalar::IntCmp(f)), 2) => {
                    let a = self.int(&args[0]);
                    let b = self.int(&args[1]);
                    Some(Box::new(move |fr| {
                        let x = a(fr)?;
                        Ok(f(&x, &b(fr)?))
                    }))
                }
                _ => None,
            }
        }
    }

    fn linear(&mut self, l: &LTerm) -> LFn {
        if let Some(f) = self.lin_column_use(l) {
            return f;
        }
        if matches!(lty(l, 32), Some(LTy::Real)) {
            if flat::big_flat_lin(l) {
                // A big expression without lets (forward mode of a chain of products nests
                // every line's tangent in the next): one flat run, not thousands of nested
                // closures (which also recurse as deep as the expression when run).
                let tail = Var::linear("tail", LTy::Real);
                self.uses.insert(tail.id, 1);
                let run = self.flat(&[flat::Item::Lin(&tail, l)]);
                let (s, _) = self.read(&tail);
                return Box::new(move |fr| {
                    run.run(fr)?;
                    Ok(std::mem::replace(&mut fr[s], Value::Unit).into_lin())
                });
            }
            let r = self.lin_real(l);
            return Box::new(move |fr| Ok(opt_lin(r(fr)?)));
        }
        self.nested(|c| c.linear_node(l))
    }

    /// A linear term of type Real, compiled to give the number unboxed (`None` for zero):
    /// variables, zero, sums, scaling, indexing and `lsum (lbuild ..)` loops build no [`Lin`].
    fn lin_real(&mut self, l: &LTerm) -> LRFn {
        if let Some(f) = self.lin_column_use(l) {
            return Box::new(move |fr| Ok(lin_opt(&f(fr)?)));
        }
        self.nested(|c| c.lin_real_node(l))
    }

    fn lin_real_node(&mut self, l: &LTerm) -> LRFn {
        use LTermKind as K;
        match &l.kind {
            K::Var(v) => {
                let (s, _) = self.read(v);
                Box::new(move |fr| match &fr[s] {
                    Value::Lin(x) => Ok(lin_opt(x)),
                    other => panic!("internal error: expected a linear value, found {other}"),
                })
            }
            K::Zero(_) => Box::new(|_| Ok(None)),
            K::Plus(a, b) => {
                let a = self.lin_real(a);
                let b = self.lin_real(b);
                Box::new(move |fr| {
                    let x = a(fr)?;
                    Ok(plus_opt(x, b(fr)?))
                })
            }
            K::Scale(c, e) => {
                let c = self.real(c);
                let e = self.lin_real(e);
                Box::new(move |fr| {
                    let c = c(fr)?;
                    Ok(scale_opt(c, e(fr)?))
                })
            }
            K::Index(e, i) if let Some((s, path)) = self.lin_place(e) => {
                let i = self.int(i);
                Box::new(move |fr| {
                    let i = i(fr)?;
                    Ok(lin_at(fr, s, &path).and_then(|xs| lin_opt(&xs.index(i))))
                })
            }
            K::Index(e, i) => {
                let e = self.linear(e);
                let i = self.int(i);
                Box::new(move |fr| {
                    let xs = e(fr)?;
                    Ok(lin_opt(&xs.index(i(fr)?)))
                })
            }
            K::Fst(_) | K::Snd(_) if let Some((s, path)) = self.lin_place(l) => {
                Box::new(move |fr| Ok(lin_at(fr, s, &path).and_then(lin_opt)))
            }
            K::Sum(e) if matches!(e.kind, K::Build(..)) => {
                let K::Build(n, i, body) = &e.kind else {
                    unreachable!()
                };
                // lsum (lbuild n (\i -> l)): accumulate, without building the array. A length
                // error is the lbuild's, at its position.
                let span = e.span;
                if let Some(lp) =
                    self.flat_loop(Some(n), Some(i), body, span, vec![flat::Sink::Sum])
                {
                    return Box::new(move |fr| Ok(lin_opt(&lp.run(fr)?[0])));
                }
                let n = self.int(n);
                let (s, body) = self.in_loop(|c| (c.bind(i), c.lin_real(body)));
                Box::new(move |fr| {
                    let n = value::check_len("lbuild", n(fr)?).map_err(|e| e.or_span(span))?;
                    let mut acc = None;
                    for k in 0..n {
                        fr[s] = Value::Int(k as i64);
                        acc = plus_opt(acc, body(fr)?);
                    }
                    Ok(acc)
                })
            }
            K::Let(..) | K::LinLet(..) => {
                let tail = Var::linear("tail", LTy::Real);
                self.uses.insert(tail.id, 1);
                let (steps, body) = self.linear_let_chain_into(l, Some(&tail), None);
                let body = match body {
                    Some(body) => self.lin_real(body),
                    None => {
                        let (s, _) = self.read(&tail);
                        Box::new(move |fr: &mut Frame| match &fr[s] {
                            Value::Lin(x) => Ok(lin_opt(x)),
                            other => {
                                panic!("internal error: expected a linear value, found {other}")
                            }
                        })
                    }
                };
                Box::new(move |fr| {
                    run_steps(&steps, fr)?;
                    body(fr)
                })
            }
            K::Case(e, p, a, q, b) => {
                self.case(e, p, q, |c, left| c.lin_real(if left { a } else { b }))
            }
            _ => {
                let e = deep(|| self.linear_node(l));
                Box::new(move |fr| Ok(lin_opt(&e(fr)?)))
            }
        }
    }

    /// A *linear place*: a linear variable under `fst`/`snd` (possibly none), read by reference
    /// through [`lin_at`] rather than by copying each intermediate pair (`snd (fst (fst d))`,
    /// the tangent of a captured scalar, is read once per element in a loop). Its slot and its
    /// projections from the variable outwards (`true` for `fst`). `None` for other terms, and
    /// for a variable read for the last time (moving it out keeps accumulators unique).
    fn lin_place(&mut self, l: &LTerm) -> Option<(usize, Vec<bool>)> {
        use LTermKind as K;
        let mut path = Vec::new();
        let mut cur = l;
        let v = loop {
            cur = match &cur.kind {
                K::Fst(e) => {
                    path.push(true);
                    e
                }
                K::Snd(e) => {
                    path.push(false);
                    e
                }
                K::Var(v) => break v,
                _ => return None,
            };
        };
        let (s, movable) = self.read(v);
        if movable {
            return None;
        }
        path.reverse();
        Some((s, path))
    }

    /// A linear let chain: its steps (compiled in order) and its body (not compiled).
    fn linear_let_chain<'t>(&mut self, l: &'t LTerm) -> (Vec<Step>, &'t LTerm) {
        match self.linear_let_chain_into(l, None, None) {
            (steps, Some(body)) => (steps, body),
            (_, None) => unreachable!("no tail variable given"),
        }
    }

    /// [`Self::linear_let_chain`]; with a variable `tail` (of type `Lin Real`, counted as used
    /// once), a linear-real body that is flat joins the chain's last flat run, bound to `tail`
    /// (then `None` is returned for the body: read `tail`). A loop body `let .. in expr` then
    /// runs as one flat run instead of a run and a tree of closures. With `stop` (a let node
    /// of the chain that no flat run can take), the chain ends before it: it is the body.
    fn linear_let_chain_into<'t>(
        &mut self,
        l: &'t LTerm,
        tail: Option<&'t Var>,
        stop: Option<&'t LTerm>,
    ) -> (Vec<Step>, Option<&'t LTerm>) {
        use LTermKind as K;
        let mut steps = Vec::new();
        let mut cur = l;
        loop {
            if stop.is_some_and(|s| std::ptr::eq(s, cur)) {
                return (steps, Some(cur));
            }
            let (mut run, rest) = flat::run_of_lterm(cur);
            let last = !matches!(rest.kind, K::Let(..) | K::LinLet(..));
            let with_tail = last && !run.is_empty() && tail.is_some() && flat::flat_tail(rest);
            if with_tail && let Some(t) = tail {
                run.push(flat::Item::Lin(t, rest));
            }
            if flat::worth(&run) {
                steps.push(Step::Let(Bind::Flat(Box::new(self.flat(&run)))));
                if with_tail {
                    return (steps, None);
                }
                cur = rest;
                continue;
            }
            if with_tail {
                run.pop();
            }
            match &cur.kind {
                K::Let(p, t, body) => {
                    steps.push(Step::Let(self.binding(p, t, Child::L(body))));
                    cur = body;
                }
                K::LinLet(u, l1, body) => {
                    if let Some(step) = self.lin_unzip(u, l1, body) {
                        steps.push(step);
                        cur = body;
                        continue;
                    }
                    let l1 = self.linear(l1);
                    steps.push(Step::LinLet(self.bind(u), l1));
                    cur = body;
                }
                _ => return (steps, Some(cur)),
            }
        }
    }

    fn term_node(&mut self, t: &Term) -> CFn {
        use TermKind as K;
        let span = t.span;
        match &t.kind {
            K::Var(x) if self.unzipped.contains_key(&x.id) => {
                panic!("internal error: unzipped array {} used whole", x.name)
            }
            K::Var(x) => {
                let (s, movable) = self.read(x);
                if movable {
                    Box::new(move |fr| Ok(std::mem::replace(&mut fr[s], Value::Unit)))
                } else {
                    Box::new(move |fr| Ok(fr[s].clone()))
                }
            }
            K::Lit(l) => {
                let v = l.value();
                Box::new(move |_| Ok(v.clone()))
            }
            K::Let(..) => {
                let (steps, body) = self.let_chain(t);
                let body = self.term(body);
                Box::new(move |fr| {
                    for b in &steps {
                        b.run(fr)?;
                    }
                    body(fr)
                })
            }
            K::Lam(x, b) => {
                let (size, ps, body, caps) = self.function(&[x], |c| c.term(b));
                let code = Rc::new(FunCode {
                    size,
                    param: ps[0],
                    captures: caps.iter().map(|c| c.0).collect(),
                    body,
                });
                let outer: Vec<usize> = caps.iter().map(|c| c.1).collect();
                if outer.is_empty() {
                    // A closed λ is one value: made once, shared by every evaluation.
                    let v = Value::Closure(Rc::new(EngineClosure {
                        code,
                        env: Env::new(),
                    }));
                    return Box::new(move |_| Ok(v.clone()));
                }
                Box::new(move |fr| {
                    Ok(Value::Closure(Rc::new(EngineClosure {
                        code: code.clone(),
                        env: captured(&outer, fr),
                    })))
                })
            }
            K::App(..) if is_let(t) => {
                let (steps, body) = self.let_chain(t);
                let body = self.term(body);
                Box::new(move |fr| {
                    for b in &steps {
                        b.run(fr)?;
                    }
                    body(fr)
                })
            }
            K::App(f, a) => {
                let f = self.term(f);
                let a = self.term(a);
                Box::new(move |fr| {
                    let f = f(fr)?;
                    let a = a(fr)?;
                    deep(|| f.apply(a))
                })
            }
            K::Pair(a, b) => {
                let a = self.term(a);
                let b = self.term(b);
                Box::new(move |fr| Ok(Value::pair(a(fr)?, b(fr)?)))
            }
            K::Fst(e) | K::Snd(e) => {
                if let Some(site) = self.column_node(t) {
                    return Box::new(move |fr| site.build(fr));
                }
                if let Some(p) = self.place(t, 1) {
                    return Box::new(move |fr| p.read(fr, |g| g.to_value()));
                }
                let first = matches!(t.kind, K::Fst(_));
                let pick = move |v: &Value| {
                    let (a, b) = v.expect_pair();
                    if first { a.clone() } else { b.clone() }
                };
                let e = self.term(e);
                Box::new(move |fr| Ok(pick(&e(fr)?)))
            }
            K::If(c, a, b) => {
                let c = self.boolean(c);
                let a = self.term(a);
                let b = self.term(b);
                Box::new(move |fr| if c(fr)? { a(fr) } else { b(fr) })
            }
            K::Inl(e, _) => {
                let e = self.term(e);
                Box::new(move |fr| Ok(Value::inl(e(fr)?)))
            }
            K::Inr(_, e) => {
                let e = self.term(e);
                Box::new(move |fr| Ok(Value::inr(e(fr)?)))
            }
            K::Case(e, p, a, q, b) => {
                self.case(e, p, q, |c, left| c.term(if left { a } else { b }))
            }
            K::Prim(..) if flat::big_flat_real(t) => {
                // A big real expression without lets (the primal of a written-out index chain):
                // one flat run, not thousands of nested closures (as `linear` does for linear
                // reals).
                let x = Var::fresh("big", Ty::Real);
                self.uses.insert(x.id, 1);
                let run = self.flat(&[flat::Item::Real(&x, t)]);
                let (s, _) = self.read(&x);
                Box::new(move |fr| {
                    run.run(fr)?;
                    Ok(std::mem::replace(&mut fr[s], Value::Unit))
                })
            }
            K::Prim(op, args) => self.prim(op, args, span),
            K::Array(_, items) => {
                let items: Vec<CFn> = items.iter().map(|x| self.term(x)).collect();
                Box::new(move |fr| {
                    let vs = items.iter().map(|x| x(fr)).collect::<Result<Vec<_>>>()?;
                    Ok(Value::array_of(vs))
                })
            }
            K::Map(f, xs) => {
                if let Some(col) = self.column_map(f, xs) {
                    return col;
                }
                let xs = self.term(xs);
                if let K::Lam(x, b) = &f.kind {
                    let (s, b) = self.in_loop(|c| (c.bind(x), c.term(b)));
                    return Box::new(move |fr| {
                        let xs = xs(fr)?;
                        collect(xs.array_len(), |i| {
                            fr[s] = item(&xs, i);
                            b(fr)
                        })
                    });
                }
                let f = self.term(f);
                Box::new(move |fr| {
                    let f = f(fr)?;
                    let xs = xs(fr)?;
                    collect(xs.array_len(), |i| f.apply(item(&xs, i)))
                })
            }
            K::Map2(f, xs, ys) => {
                let xs = self.term(xs);
                let ys = self.term(ys);
                let lengths = move |xs: &Value, ys: &Value| {
                    value::check_same_len("map2", xs.array_len(), ys.array_len())
                        .map_err(|e| e.or_span(span))
                };
                if let K::Lam(x, g) = &f.kind {
                    if let K::Lam(y, b) = &g.kind {
                        let (sx, sy, b) = self.in_loop(|c| (c.bind(x), c.bind(y), c.term(b)));
                        return Box::new(move |fr| {
                            let f_xs = xs(fr)?;
                            let f_ys = ys(fr)?;
                            let n = lengths(&f_xs, &f_ys)?;
                            collect(n, |i| {
                                fr[sx] = item(&f_xs, i);
                                fr[sy] = item(&f_ys, i);
                                b(fr)
                            })
                        });
                    }
                }
                let f = self.term(f);
                Box::new(move |fr| {
                    let f = f(fr)?;
                    let xs = xs(fr)?;
                    let ys = ys(fr)?;
                    let n = lengths(&xs, &ys)?;
                    collect(n, |i| f.apply(item(&xs, i))?.apply(item(&ys, i)))
                })
            }
            K::Build(n, f) => {
                let n = self.term(n);
                let len = move |n: Value| {
                    value::check_len("build", n.expect_int()).map_err(|e| e.or_span(span))
                };
                if let K::Lam(i, b) = &f.kind {
                    // The length is evaluated before the (absent) function value, as in the
                    // reference evaluator, but its error comes after evaluating `f`, which
                    // cannot fail here.
                    let (s, b) = self.in_loop(|c| (c.bind(i), c.term(b)));
                    return Box::new(move |fr| {
                        let n = len(n(fr)?)?;
                        collect(n, |k| {
                            fr[s] = Value::Int(k as i64);
                            b(fr)
                        })
                    });
                }
                let f = self.term(f);
                Box::new(move |fr| {
                    let n = n(fr)?;
                    let f = f(fr)?;
                    let n = len(n)?;
                    collect(n, |k| f.apply(Value::Int(k as i64)))
                })
            }
            K::Loop(f, x, tape) => {
                // The step's body runs in this frame, its parameter bound in a slot, once per
                // iteration: a loop of the program is a Rust loop, never a recursion.
                let tape = *tape;
                let run = move |step: &mut dyn FnMut(Value) -> Result<Value>, x: Value| {
                    if tape {
                        crate::steps::run_loop_tape(step, x, span)
                    } else {
                        crate::steps::run_loop(step, x, span)
                    }
                };
                if let K::Lam(a, b) = &f.kind {
                    let x = self.term(x);
                    let (s, b) = self.in_loop(|c| (c.bind(a), c.term(b)));
                    return Box::new(move |fr| {
                        let x = x(fr)?;
                        run(
                            &mut |st| {
                                fr[s] = st;
                                b(fr)
                            },
                            x,
                        )
                    });
                }
                let f = self.term(f);
                let x = self.term(x);
                Box::new(move |fr| {
                    let f = f(fr)?;
                    let x = x(fr)?;
                    run(&mut |st| f.apply(st), x)
                })
            }
            K::Fix(f, at) => {
                // A closure that calls the functional's closure with itself at each call
                // (`steps::FixClosure`: depth limit, step budget, stack segments).
                let at = *at;
                let f = self.term(f);
                Box::new(move |fr| Ok(crate::steps::FixClosure::value(f(fr)?, at)))
            }
            K::Index(xs, i) => {
                if let Some(site) = self.column_node(t) {
                    return Box::new(move |fr| site.build(fr));
                }
                if let Some(p) = self.place(t, 1) {
                    return Box::new(move |fr| p.read(fr, |g| g.to_value()));
                }
                let i = self.int(i);
                let at = move |xs: &Value, i: i64| xs.index(i).map_err(|e| e.or_span(span));
                let xs = self.term(xs);
                Box::new(move |fr| {
                    let xs = xs(fr)?;
                    at(&xs, i(fr)?)
                })
            }
            K::Length(_) => {
                let n = self.int(t);
                Box::new(move |fr| Ok(Value::Int(n(fr)?)))
            }
            K::Replicate(n, x) => {
                let n = self.int(n);
                let x = self.term(x);
                Box::new(move |fr| {
                    let n = n(fr)?;
                    let x = x(fr)?;
                    let n = value::check_len("replicate", n).map_err(|e| e.or_span(span))?;
                    Ok(match x {
                        Value::Real(r) => Value::reals(vec![r; n]),
                        x => Value::array_of(vec![x; n]),
                    })
                })
            }
            K::LinLam(v, body) => {
                let (size, ps, body, caps) = self.function(&[v], |c| c.linear(body));
                let code = Rc::new(LinCode {
                    size,
                    param: ps[0],
                    captures: caps.iter().map(|c| c.0).collect(),
                    body,
                    name: v.name.clone(),
                });
                let outer: Vec<usize> = caps.iter().map(|c| c.1).collect();
                if outer.is_empty() {
                    // A closed λ̲ (`\v ⊸ 0` in a branch's derivative) is made once.
                    let v = Value::LinFun(LinFun::new(EngineLinear {
                        code,
                        env: Env::new(),
                    }));
                    return Box::new(move |_| Ok(v.clone()));
                }
                Box::new(move |fr| {
                    Ok(Value::LinFun(LinFun::new(EngineLinear {
                        code: code.clone(),
                        env: captured(&outer, fr),
                    })))
                })
            }
            K::LinApp(f, a) => {
                let f = self.term(f);
                let a = self.term(a);
                Box::new(move |fr| {
                    let f = expect_lin_fun(f(fr)?);
                    let a = expect_lin(a(fr)?);
                    Ok(Value::Lin(f.apply(&a).map_err(|e| e.or_span(span))?))
                })
            }
            K::LinPrim(op, a) => {
                let op = op.clone();
                let a = self.term(a);
                Box::new(move |fr| {
                    Ok(Value::LinFun(
                        op.make(&a(fr)?).map_err(|e| e.or_span(span))?,
                    ))
                })
            }
        }
    }

    /// A term of type Int, compiled to give the integer (variables, literals, lengths and
    /// integer arithmetic build no [`Value`]).
    fn int(&mut self, t: &Term) -> IFn {
        self.nested(|c| c.int_node(t))
    }

    fn int_node(&mut self, t: &Term) -> IFn {
        use TermKind as K;
        match &t.kind {
            K::Lit(l) => {
                if let Value::Int(x) = l.value() {
                    return Box::new(move |_| Ok(x));
                }
            }
            K::Var(x) => {
                let (s, _) = self.read(x);
                return Box::new(move |fr| Ok(fr[s].expect_int()));
            }
            K::Fst(_) | K::Snd(_) | K::Index(..) => {
                if let Some(p) = self.place(t, 1) {
                    return Box::new(move |fr| p.read(fr, |g| g.value().expect_int()));
                }
            }
            K::Length(xs) => {
                if let K::Var(x) = &xs.kind {
                    if let Some(shape) = self.unzipped.get(&x.id) {
                        let (s, _) = self.read_id(shape.first());
                        return Box::new(move |fr| Ok(fr[s].array_len() as i64));
                    }
                }
                if let Some(p) = self.place(xs, 0) {
                    return Box::new(move |fr| p.read(fr, |g| g.value().array_len() as i64));
                }
                let xs = self.term(xs);
                return Box::new(move |fr| Ok(xs(fr)?.array_len() as i64));
            }
            K::Prim(op, args) => {
                if let Some(n) = self.int_prim(op, args, t.span) {
                    return n;
                }
            }
            _ => {}
        }
        let t = self.term(t);
        Box::new(move |fr| Ok(t(fr)?.expect_int()))
    }

    /// Integer arithmetic on unboxed operands (the primitive itself reports a failure).
    fn int_prim(&mut self, op: &Prim, args: &[Term], span: Span) -> Option<IFn> {
        {
            {
                if let (Some(Scalar::Int2(f)), 2) = (op.scalar(), args.len()) {
                    let a = self.int(&args[0]);
                    let b = self.int(&args[1]);
                    let op = op.clone();
                    return Some(Box::new(move |fr| {
                        let x = a(fr)?;
                        let y = b(fr)?;
                        match f(x, y) {
                            Some(z) => Ok(z),
                            None => Ok(op
                                .eval_args(vec![Value::Int(x), Value::Int(y)])
                                .map_err(|e| e.or_span(span))?
                                .expect_int()),
                        }
                    }));
                }
            }
        }
        None
    }

    fn prim(&mut self, op: &Prim, args: &[Term], span: Span) -> CFn {
        let at = move |e: Error| e.or_span(span);
        if let Some(r) = self.real_prim(op, args) {
            return Box::new(move |fr| Ok(Value::Real(r(fr)?)));
        }
        if let Some(b) = self.bool_prim(op, args) {
            return Box::new(move |fr| Ok(Value::Bool(b(fr)?)));
        }
        if let Some(n) = self.int_prim(op, args, span) {
            return Box::new(move |fr| Ok(Value::Int(n(fr)?)));
        }
        if op.scalar().is_none() && args.len() == 1 && op.name() == "sum" {
            if let Some(code) = self.fused_sum(&args[0]) {
                return code;
            }
        }
        let args: Vec<CFn> = args.iter().map(|a| self.term(a)).collect();
        let op = op.clone();
        Box::new(move |fr| {
            let vs = args.iter().map(|a| a(fr)).collect::<Result<Vec<_>>>()?;
            op.eval_args(vs).map_err(at)
        })
    }

    /// `sum (map (\x -> e) xs)` and `sum (build n (\i -> e))` as loops adding up the
    /// elements unboxed, without the intermediate array (the same additions, in the same order,
    /// as the primitive: [`SumOrder`]).
    fn fused_sum(&mut self, arr: &Term) -> Option<CFn> {
        use TermKind as K;
        match &arr.kind {
            K::Map(f, xs) => {
                if let Some(col) = self.column_map(f, xs) {
                    return Some(Box::new(move |fr| {
                        let xs = col(fr)?;
                        let sum = crate::value::sum_reals(xs.expect_reals().iter().copied());
                        Ok(Value::Real(sum))
                    }));
                }
                let K::Lam(x, b) = &f.kind else { return None };
                let xs = self.term(xs);
                let (s, b) = self.in_loop(|c| (c.bind(x), c.real(b)));
                Some(Box::new(move |fr| {
                    let xs = xs(fr)?;
                    let mut acc = SumOrder::default();
                    for k in 0..xs.array_len() {
                        fr[s] = item(&xs, k);
                        acc.push(b(fr)?);
                    }
                    Ok(Value::Real(acc.finish()))
                }))
            }
            K::Build(n, f) => {
                let K::Lam(i, b) = &f.kind else { return None };
                let n = self.int(n);
                let bspan = arr.span;
                let (s, b) = self.in_loop(|c| (c.bind(i), c.real(b)));
                Some(Box::new(move |fr| {
                    let n = value::check_len("build", n(fr)?).map_err(|e| e.or_span(bspan))?;
                    let mut acc = SumOrder::default();
                    for k in 0..n {
                        fr[s] = Value::Int(k as i64);
                        acc.push(b(fr)?);
                    }
                    Ok(Value::Real(acc.finish()))
                }))
            }
            _ => None,
        }
    }

    fn linear_node(&mut self, l: &LTerm) -> LFn {
        use LTermKind as K;
        let span = l.span;
        let at = move |e: Error| e.or_span(span);
        match &l.kind {
            K::Var(v) => {
                let (s, movable) = self.read(v);
                if movable {
                    Box::new(move |fr| Ok(expect_lin(std::mem::replace(&mut fr[s], Value::Unit))))
                } else {
                    Box::new(move |fr| match &fr[s] {
                        Value::Lin(x) => Ok(x.clone()),
                        other => panic!("internal error: expected a linear value, found {other}"),
                    })
                }
            }
            K::Zero(_) => Box::new(|_| Ok(Lin::zero())),
            K::Chain(fs, a, rev, outs) => {
                let (rev, outs) = (*rev, *outs);
                let fs = self.term(fs);
                let a = self.linear(a);
                Box::new(move |fr| {
                    let fs = fs(fr)?;
                    crate::steps::chain(&fs, a(fr)?, rev, outs).map_err(at)
                })
            }
            K::Plus(..) if let Some(f) = self.lin_accumulate(l) => f,
            K::Plus(a, b) => {
                let a = self.linear(a);
                let b = self.linear(b);
                Box::new(move |fr| Ok(Lin::plus(a(fr)?, b(fr)?)))
            }
            K::Pair(a, b) => {
                let a = self.linear(a);
                let b = self.linear(b);
                Box::new(move |fr| Ok(Lin::pair(a(fr)?, b(fr)?)))
            }
            K::Fst(_) | K::Snd(_) if let Some((s, path)) = self.lin_place(l) => {
                Box::new(move |fr| Ok(lin_at(fr, s, &path).cloned().unwrap_or_else(Lin::zero)))
            }
            K::Fst(e) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(e(fr)?.fst()))
            }
            K::Snd(e) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(e(fr)?.snd()))
            }
            K::App(f, e) => {
                let f = self.term(f);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let f = expect_lin_fun(f(fr)?);
                    f.apply(&e(fr)?).map_err(at)
                })
            }
            K::Let(..) | K::LinLet(..) => {
                let (steps, body) = self.linear_let_chain(l);
                let body = self.linear(body);
                Box::new(move |fr| {
                    run_steps(&steps, fr)?;
                    body(fr)
                })
            }
            K::Copower(t, e) => {
                let t = self.term(t);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let a = t(fr)?;
                    Ok(Lin::copower(Copower::singleton(a, e(fr)?)))
                })
            }
            K::CopowFold(f, e) => {
                let f = self.term(f);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let f = f(fr)?;
                    e(fr)?
                        .to_copower()
                        .fold(|a| Ok(expect_lin_fun(f.apply(a.clone())?)))
                        .map_err(at)
                })
            }
            K::PowLam(b, body) => {
                let (size, ps, body, caps) = self.function(&[b], |c| c.linear(body));
                let code = Rc::new(PowCode {
                    size,
                    param: ps[0],
                    captures: caps.iter().map(|c| c.0).collect(),
                    body,
                });
                let outer: Vec<usize> = caps.iter().map(|c| c.1).collect();
                Box::new(move |fr| {
                    let code = code.clone();
                    let env = captured(&outer, fr);
                    Ok(Lin::power(move |x| {
                        with_frame(code.size, &code.captures, &env, |frame| {
                            frame[code.param] = x.clone();
                            (code.body)(frame)
                        })
                    }))
                })
            }
            K::PowApp(e, t) => {
                let e = self.linear(e);
                let t = self.term(t);
                Box::new(move |fr| {
                    let p = e(fr)?;
                    p.apply_power(&t(fr)?).map_err(at)
                })
            }
            K::Inl(e, _) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(Lin::left(e(fr)?)))
            }
            K::Inr(_, e) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(Lin::right(e(fr)?)))
            }
            K::FromLeft(e) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(e(fr)?.from_left()))
            }
            K::FromRight(e) => {
                let e = self.linear(e);
                Box::new(move |fr| Ok(e(fr)?.from_right()))
            }
            K::Replicate(n, e) => {
                let n = self.int(n);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let n = value::check_len("replicate", n(fr)?).map_err(at)?;
                    Ok(Lin::replicate(n, &e(fr)?))
                })
            }
            K::Sum(e) => {
                if let K::Build(n, i, body) = &e.kind {
                    // A length error is the lbuild's, at its position.
                    let span = e.span;
                    if let Some(f) = self.lin_sum_build(n, i, body, span) {
                        return f;
                    }
                    // lsum (lbuild n (\i -> l)): accumulate, without building the array.
                    let n = self.int(n);
                    let (s, body) = self.in_loop(|c| (c.bind(i), c.linear(body)));
                    return Box::new(move |fr| {
                        let n = value::check_len("lbuild", n(fr)?).map_err(|e| e.or_span(span))?;
                        let mut acc = Lin::zero();
                        for k in 0..n {
                            fr[s] = Value::Int(k as i64);
                            acc = Lin::plus(acc, body(fr)?);
                        }
                        Ok(acc)
                    });
                }
                let e = self.linear(e);
                Box::new(move |fr| Ok(e(fr)?.sum()))
            }
            K::OneHot(n, i, e) => {
                let n = self.int(n);
                let i = self.int(i);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let n = value::check_len("onehot", n(fr)?).map_err(at)?;
                    let i = i(fr)?;
                    Lin::onehot(n, i, e(fr)?).map_err(at)
                })
            }
            K::Index(e, i) => {
                let e = self.linear(e);
                let i = self.int(i);
                Box::new(move |fr| {
                    let xs = e(fr)?;
                    Ok(xs.index(i(fr)?))
                })
            }
            K::ZipWith(fs, e) => {
                let fs = self.term(fs);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let fs = fs(fr)?;
                    let xs = e(fr)?;
                    xs.zip_with(fs.array_len(), |i| Ok(expect_lin_fun(fs.index(i as i64)?)))
                        .map_err(at)
                })
            }
            K::Map(f, e) => {
                let f = self.term(f);
                let e = self.linear(e);
                Box::new(move |fr| {
                    let f = expect_lin_fun(f(fr)?);
                    e(fr)?.map(&f).map_err(at)
                })
            }
            K::Build(n, i, body) if matches!(lty(body, 32), Some(LTy::Real)) => {
                // Elements of type Real: computed unboxed, stored unboxed.
                let n = self.int(n);
                let (s, body) = self.in_loop(|c| (c.bind(i), c.lin_real(body)));
                Box::new(move |fr| {
                    let n = value::check_len("lbuild", n(fr)?).map_err(at)?;
                    Lin::build_reals(n, |k| {
                        fr[s] = Value::Int(k as i64);
                        body(fr)
                    })
                })
            }
            K::Build(n, i, body) => {
                let n = self.int(n);
                let (s, body) = self.in_loop(|c| (c.bind(i), c.linear(body)));
                Box::new(move |fr| {
                    let n = value::check_len("lbuild", n(fr)?).map_err(at)?;
                    Lin::build(n, |k| {
                        fr[s] = Value::Int(k as i64);
                        body(fr)
                    })
                })
            }
            K::Scale(c, e) => {
                let c = self.real(c);
                // `e` has `l`'s type, which `linear` found not to be Real (`lty` reads through
                // scalings): asking again at every level of a chain would be quadratic.
                let e = match self.lin_column_use(e) {
                    Some(f) => f,
                    None => deep(|| self.linear_node(e)),
                };
                Box::new(move |fr| {
                    let c = c(fr)?;
                    Ok(Lin::scale(c, &e(fr)?))
                })
            }
            K::Case(e, p, a, q, b) => {
                self.case(e, p, q, |c, left| c.linear(if left { a } else { b }))
            }
        }
    }
}

/// `case e of inl p -> a | inr q -> b`, for branches of any result (Cartesian, linear, unboxed).
fn case_of<R: 'static>(
    e: CFn,
    p: PatCode,
    a: Compiled<R>,
    q: PatCode,
    b: Compiled<R>,
) -> Compiled<R> {
    Box::new(move |fr| match e(fr)? {
        Value::Inl(v) => {
            p.bind(unwrap_rc(v), fr);
            a(fr)
        }
        Value::Inr(v) => {
            q.bind(unwrap_rc(v), fr);
            b(fr)
        }
        other => panic!("internal error: case on {other}"),
    })
}

/// Runs the steps of a linear let chain.
fn run_steps(steps: &[Step], fr: &mut Frame) -> Result<()> {
    for step in steps {
        match step {
            Step::Let(b) => b.run(fr)?,
            Step::LinLet(s, l) => fr[*s] = Value::Lin(l(fr)?),
            Step::LinUnzip(u) => u.run(fr)?,
            Step::FlatUnzip(u) => u.run(fr)?,
        }
    }
    Ok(())
}

/// A linear real as `None` (zero) or its number.
/// The linear value at a place ([`Compiler::lin_place`]), by reference; `None` if a pair on
/// the way is zero (so the value is zero).
fn lin_at<'f>(fr: &'f Frame, s: usize, path: &[bool]) -> Option<&'f Lin> {
    let mut cur = match &fr[s] {
        Value::Lin(x) => x,
        other => panic!("internal error: expected a linear value, found {other}"),
    };
    for &first in path {
        cur = if first {
            cur.fst_ref()?
        } else {
            cur.snd_ref()?
        };
    }
    Some(cur)
}

fn lin_opt(x: &Lin) -> Option<f64> {
    if x.is_zero() { None } else { Some(x.to_real()) }
}

fn opt_lin(x: Option<f64>) -> Lin {
    x.map_or_else(Lin::zero, Lin::real)
}

/// [`Lin::plus`] on linear reals.
#[inline]
fn plus_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, y) => y,
        (x, None) => x,
        (Some(x), Some(y)) => Some(x + y),
    }
}

/// [`Lin::scale`] on linear reals (zero is strong: `0 · x` and `c · 0` are exactly zero).
#[inline]
fn scale_opt(c: f64, x: Option<f64>) -> Option<f64> {
    if c == 0.0 {
        return None;
    }
    x.map(|y| if y == 0.0 { 0.0 } else { c * y })
}

/// The linear type of `l` where the types of its variables tell it cheaply (within `budget`
/// nested nodes; let chains are followed to their bodies), else `None`.
fn lty(l: &LTerm, budget: u32) -> Option<LTy> {
    use LTermKind as K;
    if budget == 0 {
        return None;
    }
    let b = budget - 1;
    let mut l = l;
    // Bodies of lets and scaled terms have the type of the whole: followed without spending
    // the budget, so a long chain of scalings (`2 * (x * (0.5 * ..))`, forward mode of a
    // chain of products) is typed at its top, and compiled unboxed from there.
    while let K::Let(_, _, body) | K::LinLet(_, _, body) | K::Scale(_, body) = &l.kind {
        l = body;
    }
    let prod = |t: LTy, first: bool| match t {
        LTy::Prod(p) | LTy::Sum(p) => Some(if first { p.0.clone() } else { p.1.clone() }),
        _ => None,
    };
    let elem = |t: LTy| match t {
        LTy::Array(e) => Some((**e).clone()),
        _ => None,
    };
    match &l.kind {
        K::Var(v) => v.lin_ty().cloned(),
        K::Zero(t) => Some(t.clone()),
        K::Plus(x, y) => lty(x, b).or_else(|| lty(y, b)),
        K::Fst(e) | K::FromLeft(e) => prod(lty(e, b)?, true),
        K::Snd(e) | K::FromRight(e) => prod(lty(e, b)?, false),
        K::Index(e, _) | K::Sum(e) => elem(lty(e, b)?),
        K::Build(_, _, e) | K::OneHot(_, _, e) | K::Replicate(_, e) => Some(LTy::array(lty(e, b)?)),
        K::Case(_, _, x, _, y) => lty(x, b).or_else(|| lty(y, b)),
        K::App(f, _) => match &f.kind {
            TermKind::Var(x) => match &x.ty {
                Ty::LinFun(p) => Some(p.1.clone()),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// A step of a linear let chain.
enum Step {
    Let(Bind),
    LinLet(usize, LFn),
    LinUnzip(Box<LinUnzip>),
    FlatUnzip(Box<FlatUnzip>),
}

/// A compiled binding pattern.
enum PatCode {
    Slot(usize),
    Wild,
    Pair(Box<PatCode>, Box<PatCode>),
}

/// The values a pattern binds, with their slots, collected before they are written (when
/// they are read from the frame itself).
type Leaves = SmallVec<[(usize, Value); 8]>;

impl PatCode {
    fn bind(&self, v: Value, fr: &mut Frame) {
        match self {
            PatCode::Slot(s) => fr[*s] = v,
            PatCode::Wild => {}
            PatCode::Pair(a, b) => match v {
                Value::Pair(p) => match Rc::try_unwrap(p) {
                    Ok(p) => {
                        let (x, y) = p.into_inner();
                        a.bind(x, fr);
                        b.bind(y, fr);
                    }
                    Err(p) => {
                        // Shared: copy only the leaves, not every inner pair on the way.
                        let mut out = Leaves::new();
                        a.leaves(&p.0, &mut out);
                        b.leaves(&p.1, &mut out);
                        for (s, v) in out {
                            fr[s] = v;
                        }
                    }
                },
                other => panic!("internal error: pair pattern on {other}"),
            },
        }
    }

    /// The values bound by matching `v`, by reference.
    fn leaves(&self, v: &Value, out: &mut Leaves) {
        match self {
            PatCode::Slot(s) => out.push((*s, v.clone())),
            PatCode::Wild => {}
            PatCode::Pair(a, b) => {
                let (x, y) = v.expect_pair();
                a.leaves(x, out);
                b.leaves(y, out);
            }
        }
    }
}

/// A compiled `let` binding.
enum Bind {
    /// Evaluate, then match (moving out of uniquely owned pairs).
    Value(PatCode, CFn),
    /// Match a pair pattern against a place, by reference.
    Place(PatCode, Place),
    /// Match a pattern against a tuple node of an unzipped array's element.
    Columns(PatCode, ColSite),
    /// Build an array of tuples unzipped.
    Unzip(Box<Unzip>),
    /// A run of scalar bindings, as flat code.
    Flat(Box<flat::Flat>),
}

impl Bind {
    #[inline]
    fn run(&self, fr: &mut Frame) -> Result<()> {
        match self {
            Bind::Value(p, e) => {
                let v = e(fr)?;
                p.bind(v, fr);
            }
            Bind::Place(p, place) => {
                let mut out = Leaves::new();
                place.read(fr, |g| p.leaves(g.value(), &mut out))?;
                for (s, v) in out {
                    fr[s] = v;
                }
            }
            Bind::Columns(p, site) => {
                let j = site.index(fr)?;
                let mut out = Leaves::new();
                column_leaves(p, &site.node, fr, j, &mut out);
                for (s, v) in out {
                    fr[s] = v;
                }
            }
            Bind::Unzip(u) => u.run(fr)?,
            Bind::Flat(f) => f.run(fr)?,
        }
        Ok(())
    }
}

/// One step of a [`Place`].
enum PStep {
    Fst,
    Snd,
    /// `! i`, with the index's code and the position of the indexing node.
    Index(IFn, Span),
}

/// A *place*: a variable followed by projections and indexing (`snd (xs ! i)`), read by
/// reference through the path, so that only the value at its end is copied (or, for a real,
/// not even that) instead of every intermediate pair and element.
struct Place {
    root: usize,
    /// From the variable outwards.
    steps: Vec<PStep>,
    /// How many steps are `Index`.
    indices: usize,
}

/// The value at the end of a place: borrowed from the frame, or an element of an unboxed
/// real array.
enum Got<'a> {
    Ref(&'a Value),
    Real(f64),
}

impl Got<'_> {
    fn to_value(&self) -> Value {
        match self {
            Got::Ref(v) => (*v).clone(),
            Got::Real(x) => Value::Real(*x),
        }
    }

    fn real(&self) -> f64 {
        match self {
            Got::Ref(v) => v.expect_real(),
            Got::Real(x) => *x,
        }
    }

    fn value(&self) -> &Value {
        match self {
            Got::Ref(v) => v,
            Got::Real(x) => panic!("internal error: expected a pair or an array, found {x}"),
        }
    }
}

impl Place {
    /// Reads the place and passes what is there to `k`.
    ///
    /// The reference evaluator evaluates `xs ! i` as `xs`, then `i`, then the indexing. Here the
    /// indices are evaluated first (they need the frame mutably), then the path is walked.
    /// Walking the path has no effect but its out-of-range errors, so the order is only
    /// observable when an index's evaluation fails: then the path up to that index is walked
    /// first, and an out-of-range error there is the one reported, as it would have come first.
    #[inline]
    fn read<R>(&self, fr: &mut Frame, k: impl FnOnce(Got<'_>) -> R) -> Result<R> {
        let mut ix: SmallVec<[i64; 4]> = SmallVec::new();
        if self.indices > 0 {
            for (n, st) in self.steps.iter().enumerate() {
                if let PStep::Index(i, _) = st {
                    match i(fr) {
                        Ok(i) => ix.push(i),
                        Err(e) => {
                            self.walk(fr, &ix, n)?;
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(k(self.walk(fr, &ix, self.steps.len())?))
    }

    /// Walks the first `upto` steps, with the given values of their indices.
    #[inline]
    fn walk<'a>(&self, fr: &'a Frame, ix: &[i64], upto: usize) -> Result<Got<'a>> {
        let mut cur = &fr[self.root];
        let mut ix = ix.iter();
        for st in &self.steps[..upto] {
            cur = match st {
                PStep::Fst => cur.expect_pair().0,
                PStep::Snd => cur.expect_pair().1,
                PStep::Index(_, span) => {
                    let i = *ix.next().expect("an evaluated index");
                    let at = |e: Error| e.or_span(*span);
                    match cur {
                        Value::RealArray(xs) => {
                            let j = value::check_index(i, xs.len()).map_err(at)?;
                            return Ok(Got::Real(xs[j]));
                        }
                        Value::Array(xs) => &xs[value::check_index(i, xs.len()).map_err(at)?],
                        other => panic!("internal error: expected an array, found {other}"),
                    }
                }
            };
        }
        Ok(Got::Ref(cur))
    }
}

/// The tuple shape of an unzipped array's elements: a leaf is a column, named by a fresh
/// variable identity (bound in the frame like any variable, so closures capture it).
enum Shape {
    Leaf(VarId),
    Pair(Box<Shape>, Box<Shape>),
}

impl Shape {
    fn ids(&self, out: &mut Vec<VarId>) {
        match self {
            Shape::Leaf(id) => out.push(*id),
            Shape::Pair(a, b) => {
                a.ids(out);
                b.ids(out);
            }
        }
    }

    /// Some column (they all have the array's length).
    fn first(&self) -> VarId {
        match self {
            Shape::Leaf(id) => *id,
            Shape::Pair(a, _) => a.first(),
        }
    }
}

/// The shape of a tuple expression (nested pairs), with its leaves in evaluation order.
fn shape_of<'t>(t: &'t Term, leaves: &mut Vec<&'t Term>) -> Shape {
    match &t.kind {
        TermKind::Pair(a, b) => {
            Shape::Pair(Box::new(shape_of(a, leaves)), Box::new(shape_of(b, leaves)))
        }
        _ => {
            leaves.push(t);
            Shape::Leaf(VarId::fresh())
        }
    }
}

/// For `\r -> body`: the column `body` reads if it is projections of `r` reaching a leaf.
fn leaf_of_projection(shape: &Shape, r: &Var, body: &Term) -> Option<VarId> {
    let mut path = Vec::new();
    let mut cur = body;
    loop {
        cur = match &cur.kind {
            TermKind::Fst(e) => {
                path.push(true);
                e
            }
            TermKind::Snd(e) => {
                path.push(false);
                e
            }
            TermKind::Var(x) if x.id == r.id => break,
            _ => return None,
        };
    }
    let mut node = shape;
    for first in path.into_iter().rev() {
        node = match node {
            Shape::Pair(a, b) => {
                if first {
                    a
                } else {
                    b
                }
            }
            Shape::Leaf(_) => return None,
        };
    }
    match node {
        Shape::Leaf(id) => Some(*id),
        Shape::Pair(..) => None,
    }
}

/// Whether every use of `x` in `scope` can be served from the columns of `shape`: `length x`,
/// projections and indexing over `x ! j`, and `map` of a projection reaching a leaf.
fn columns_suffice(x: VarId, shape: &Shape, scope: Child<'_>) -> bool {
    use TermKind as K;
    let is_x = |e: &Term| matches!(&e.kind, K::Var(y) if y.id == x);
    let mut stack = vec![scope];
    while let Some(c) = stack.pop() {
        let t = match c {
            Child::C(t) => t,
            Child::L(l) => {
                stack.extend(l.children());
                continue;
            }
        };
        match &t.kind {
            K::Var(y) if y.id == x => return false,
            K::Length(e) if is_x(e) => continue,
            K::Map(f, e) if is_x(e) => match &f.kind {
                K::Lam(r, b) if leaf_of_projection(shape, r, b).is_some() => continue,
                _ => return false,
            },
            K::Fst(_) | K::Snd(_) | K::Index(..) => {
                // A chain over `x ! j`: only the indices are left to check.
                let mut cur = t;
                let mut indices = SmallVec::<[&Term; 4]>::new();
                let mut last_index = false;
                let over_x = loop {
                    match &cur.kind {
                        K::Fst(e) | K::Snd(e) => {
                            last_index = false;
                            cur = e;
                        }
                        K::Index(e, i) => {
                            indices.push(i);
                            last_index = true;
                            cur = e;
                        }
                        K::Var(y) => break y.id == x,
                        _ => break false,
                    }
                };
                if over_x {
                    if !last_index {
                        return false;
                    }
                    stack.extend(indices.into_iter().map(Child::C));
                    continue;
                }
            }
            _ => {}
        }
        stack.extend(t.children());
    }
    true
}

/// The column slots of a tuple node of an unzipped array's element, in the current frame.
enum RtShape {
    Leaf(usize),
    Pair(Box<RtShape>, Box<RtShape>),
}

impl RtShape {
    /// The element's tuple node at `j` (in range), as a value.
    fn build(&self, fr: &Frame, j: usize) -> Value {
        match self {
            RtShape::Leaf(s) => item(&fr[*s], j),
            RtShape::Pair(a, b) => Value::pair(a.build(fr, j), b.build(fr, j)),
        }
    }
}

/// What a chain over an unzipped array's element reaches.
enum ColChain {
    /// A leaf: a place in its column (which starts by indexing it).
    Leaf(Place),
    /// A tuple node.
    Node(ColSite),
}

/// A tuple node of element `j` of an unzipped array.
struct ColSite {
    j: IFn,
    /// The indexing node's position.
    span: Span,
    /// A column's slot, for the length.
    len: usize,
    node: RtShape,
}

impl ColSite {
    /// The index, checked against the array's length.
    fn index(&self, fr: &mut Frame) -> Result<usize> {
        let j = (self.j)(fr)?;
        value::check_index(j, fr[self.len].array_len()).map_err(|e| e.or_span(self.span))
    }

    fn build(&self, fr: &mut Frame) -> Result<Value> {
        let j = self.index(fr)?;
        Ok(self.node.build(fr, j))
    }
}

/// The values a pattern binds when matched against a tuple node of element `j`.
fn column_leaves(p: &PatCode, node: &RtShape, fr: &Frame, j: usize, out: &mut Leaves) {
    match (p, node) {
        (PatCode::Wild, _) => {}
        (PatCode::Pair(a, b), RtShape::Pair(l, r)) => {
            column_leaves(a, l, fr, j, out);
            column_leaves(b, r, fr, j, out);
        }
        (PatCode::Slot(s), node) => out.push((*s, node.build(fr, j))),
        (PatCode::Pair(..), RtShape::Leaf(c)) => p.leaves(&item(&fr[*c], j), out),
    }
}

/// Where an unzipped array's elements come from.
enum UnzipSrc {
    /// `build n`, with the position of the `build`.
    Build(IFn, Span),
    /// `map` over an array.
    Map(CFn),
}

/// `build n (\i -> body)` or `map (\x -> body) xs` whose body ends in a tuple, built as one
/// array per leaf of the tuple.
struct Unzip {
    src: UnzipSrc,
    /// The loop variable's slot.
    var: usize,
    /// The body's let chain, and the tuple's leaves.
    steps: Vec<Bind>,
    leaves: Vec<CFn>,
    /// The columns' slots, one per leaf.
    cols: Vec<usize>,
}

impl Unzip {
    fn run(&self, fr: &mut Frame) -> Result<()> {
        let mut cols: Vec<Column> = self.leaves.iter().map(|_| Column::Empty).collect();
        let mut body = |fr: &mut Frame| -> Result<()> {
            for b in &self.steps {
                b.run(fr)?;
            }
            for (c, leaf) in cols.iter_mut().zip(&self.leaves) {
                c.push(leaf(fr)?);
            }
            Ok(())
        };
        match &self.src {
            UnzipSrc::Build(n, span) => {
                let n = value::check_len("build", n(fr)?).map_err(|e| e.or_span(*span))?;
                for k in 0..n {
                    fr[self.var] = Value::Int(k as i64);
                    body(fr)?;
                }
            }
            UnzipSrc::Map(xs) => {
                let xs = xs(fr)?;
                for k in 0..xs.array_len() {
                    fr[self.var] = item(&xs, k);
                    body(fr)?;
                }
            }
        }
        for (c, &s) in cols.into_iter().zip(&self.cols) {
            fr[s] = c.finish();
        }
        Ok(())
    }
}

/// A column being built: unboxed when its first element is a real (as [`collect`] does).
enum Column {
    Empty,
    Reals(Vec<f64>),
    Values(Vec<Value>),
}

impl Column {
    fn push(&mut self, v: Value) {
        match (&mut *self, v) {
            (Column::Reals(xs), Value::Real(x)) => xs.push(x),
            (Column::Values(xs), v) => xs.push(v),
            (Column::Empty, Value::Real(x)) => *self = Column::Reals(vec![x]),
            (Column::Empty, v) => *self = Column::Values(vec![v]),
            (Column::Reals(_), other) => {
                panic!("internal error: mixed array elements (Real and {other})")
            }
        }
    }

    fn finish(self) -> Value {
        match self {
            Column::Empty => Value::reals(Vec::new()),
            Column::Reals(xs) => Value::reals(xs),
            Column::Values(xs) => Value::Array(Rc::new(xs)),
        }
    }
}

/// Whether `t` is a `let` (or a `(\x -> b) a`).
fn is_let(t: &Term) -> bool {
    match &t.kind {
        TermKind::Let(..) => true,
        TermKind::App(f, _) => matches!(f.kind, TermKind::Lam(..)),
        _ => false,
    }
}

/// The payload of a sum value, moved out when uniquely owned.
fn unwrap_rc(v: Rc<crate::deep::Deep<Value>>) -> Value {
    match Rc::try_unwrap(v) {
        Ok(v) => v.into_inner(),
        Err(v) => (**v).clone(),
    }
}

/// Element `i` (in range) of an array value.
fn item(xs: &Value, i: usize) -> Value {
    match xs {
        Value::RealArray(r) => Value::Real(r[i]),
        Value::Array(a) => a[i].clone(),
        other => panic!("internal error: expected an array, found {other}"),
    }
}

/// The array of `f(0), ..., f(n-1)`, unboxed when the elements are reals.
fn collect(n: usize, mut f: impl FnMut(usize) -> Result<Value>) -> Result<Value> {
    if n == 0 {
        return Ok(Value::reals(Vec::new()));
    }
    let first = f(0)?;
    if let Value::Real(x) = first {
        let mut out = Vec::with_capacity(n);
        out.push(x);
        for i in 1..n {
            match f(i)? {
                Value::Real(x) => out.push(x),
                other => panic!("internal error: mixed array elements (Real and {other})"),
            }
        }
        Ok(Value::reals(out))
    } else {
        let mut out = Vec::with_capacity(n);
        out.push(first);
        for i in 1..n {
            out.push(f(i)?);
        }
        Ok(Value::Array(Rc::new(out)))
    }
}

fn expect_lin(v: Value) -> Lin {
    v.into_lin()
}

fn expect_lin_fun(v: Value) -> LinFun {
    v.expect_lin_fun().clone()
}

/// A compiled function body: frame size, captures' slots, parameter slot.
struct FunCode {
    size: usize,
    param: usize,
    captures: Vec<usize>,
    body: CFn,
}

/// Captured values, stored inline in the closure's allocation when there are few.
type Env = SmallVec<[Value; 4]>;

/// The sinks of a flat loop that accumulates: a literal zero leaf is never computed, every
/// other leaf goes to `sink` (summed, or added into the caller's accumulators).
fn sinks_of(leaves: &[&LShape], sink: flat::Sink) -> Vec<flat::Sink> {
    leaves
        .iter()
        .map(|l| match l {
            LShape::Zero => flat::Sink::Zero,
            _ => sink,
        })
        .collect()
}

/// The values of the given slots of a frame.
fn captured(slots: &[usize], fr: &Frame) -> Env {
    let mut env = Env::with_capacity(slots.len());
    for &s in slots {
        env.push(copy(&fr[s]));
    }
    env
}

/// Whether a value owns no heap part (dropping it does nothing).
#[inline(always)]
fn scalar(v: &Value) -> bool {
    matches!(
        v,
        Value::Real(_) | Value::Int(_) | Value::Bool(_) | Value::Unit
    )
}

/// `v.clone()`, with the scalars (most captured values of derivative code: the primal's
/// intermediate reals) copied inline rather than through the out-of-line `clone`.
#[inline(always)]
fn copy(v: &Value) -> Value {
    match v {
        Value::Real(x) => Value::Real(*x),
        v => v.clone(),
    }
}

/// `*slot = v`, without the out-of-line drop of the old value when it is a scalar (frame
/// slots mostly hold scalars: pooled frames hold nothing else).
#[inline(always)]
pub(super) fn put(slot: &mut Value, v: Value) {
    if scalar(slot) {
        std::mem::forget(std::mem::replace(slot, v));
    } else {
        *slot = v;
    }
}

/// Drops an environment, the scalars without a call each.
fn release(env: &mut Env) {
    // Under `deep_drop`: a captured value may be a closure capturing a closure, as deep as the
    // program (the derivative of a deeply nested `if`).
    crate::deep::deep_drop(|| {
        for v in std::mem::take(env) {
            if scalar(&v) {
                std::mem::forget(v);
            } else {
                drop(v);
            }
        }
    })
}

/// A closure value: compiled body and captured values.
struct EngineClosure {
    code: Rc<FunCode>,
    env: Env,
}

thread_local! {
    /// Frames of finished calls, reused so that a call does not allocate one.
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a frame of `size` slots with the captured values in place. The frame comes
/// from (and, emptied, goes back to) a per-thread pool.
fn with_frame<R>(
    size: usize,
    captures: &[usize],
    env: &[Value],
    f: impl FnOnce(&mut Frame) -> R,
) -> R {
    let mut frame = FRAMES.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    // A pooled frame holds only values without heap parts (see below), so shortening it drops
    // nothing and only new slots are written.
    frame.resize(size, Value::Unit);
    for (&s, v) in captures.iter().zip(env) {
        put(&mut frame[s], copy(v));
    }
    let out = f(&mut frame);
    // Release what the call left in its slots (so that no value outlives the call, and
    // reference counts are what the code expects), in one pass, and keep the length: scalars
    // stay, as they own nothing.
    for v in frame.iter_mut() {
        if !matches!(
            v,
            Value::Real(_) | Value::Int(_) | Value::Bool(_) | Value::Unit
        ) {
            *v = Value::Unit;
        }
    }
    FRAMES.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < 64 {
            pool.push(frame);
        }
    });
    out
}

impl Closure for EngineClosure {
    fn apply(&self, arg: Value) -> Result<Value> {
        let c = &self.code;
        with_frame(c.size, &c.captures, &self.env, |frame| {
            frame[c.param] = arg;
            (c.body)(frame)
        })
    }
}

/// A compiled linear λ body.
struct LinCode {
    size: usize,
    param: usize,
    captures: Vec<usize>,
    body: LFn,
    name: Rc<str>,
}

/// The value of a linear λ: a linear map.
struct EngineLinear {
    code: Rc<LinCode>,
    env: Env,
}

impl Drop for EngineLinear {
    fn drop(&mut self) {
        release(&mut self.env);
    }
}

impl Drop for EngineClosure {
    fn drop(&mut self) {
        release(&mut self.env);
    }
}

impl LinearMap for EngineLinear {
    fn apply(&self, x: &Lin) -> Result<Lin> {
        let c = &self.code;
        with_frame(c.size, &c.captures, &self.env, |frame| {
            frame[c.param] = Value::Lin(x.clone());
            (c.body)(frame)
        })
    }
    fn apply_owned(&self, x: Lin) -> Result<Lin> {
        let c = &self.code;
        with_frame(c.size, &c.captures, &self.env, |frame| {
            frame[c.param] = Value::Lin(x);
            (c.body)(frame)
        })
    }
    fn describe(&self) -> String {
        format!("\\{} ⊸ ...", self.code.name)
    }
}

/// A compiled power body `\b -> l`.
struct PowCode {
    size: usize,
    param: usize,
    captures: Vec<usize>,
    body: LFn,
}

/// Counts the occurrences of every variable.
fn count_uses(root: super::term::Child<'_>, uses: &mut FxHashMap<VarId, u32>) {
    root.each_var(|x| *uses.entry(x.id).or_default() += 1);
}

// ----- linear accumulation and unzipped linear arrays -----

/// The pair structure a linear term's value is built with, found from its literal pairs
/// (through sums and lets): the accumulator of `lsum (lbuild ..)` and the columns of an
/// unzipped linear array have one leaf per leaf of it.
#[derive(Clone, Debug)]
enum LShape {
    /// Always zero (only `0` reaches this position).
    Zero,
    /// Any value; `true` if a one-hot array reaches it (then it is accumulated in place).
    Leaf(bool),
    Pair(Box<LShape>, Box<LShape>),
}

impl LShape {
    fn of(l: &LTerm) -> LShape {
        LShape::of_in(l, &mut Vec::new())
    }

    /// [`LShape::of`], given the shapes of the values of the linear variables let-bound around
    /// `l` in it (innermost last): a projection of such a variable (`fst v`, which
    /// [`Compiler::lin_let_forward`] sends the leaves of `v`'s value to) has the shape of that
    /// part of the value, and a nested `lsum (lbuild n (\i -> b))` (added into the enclosing
    /// accumulators by [`Compiler::lin_into`]) has the shape of `b`.
    fn of_in(l: &LTerm, env: &mut Vec<(VarId, LShape)>) -> LShape {
        use LTermKind as K;
        deep(|| match &l.kind {
            K::Zero(_) => LShape::Zero,
            K::OneHot(..) => LShape::Leaf(true),
            K::Plus(a, b) => LShape::of_in(a, env).merge(LShape::of_in(b, env)),
            K::Let(_, _, b) => LShape::of_in(b, env),
            K::LinLet(u, e, b) => {
                let s = LShape::of_in(e, env);
                env.push((u.id, s));
                let out = LShape::of_in(b, env);
                env.pop();
                out
            }
            K::Pair(a, b) => LShape::Pair(
                Box::new(LShape::of_in(a, env)),
                Box::new(LShape::of_in(b, env)),
            ),
            K::Sum(e) if let K::Build(_, _, b) = &e.kind => LShape::of_in(b, env),
            K::Var(_) | K::Fst(_) | K::Snd(_) => {
                let (path, root) = lin_path(l);
                let bound =
                    lin_var(root).and_then(|u| env.iter().rev().find(|(id, _)| *id == u.id));
                match bound.map(|(_, s)| s.walk(&path)) {
                    Some((node, _, [])) => node.clone(),
                    Some((LShape::Zero, _, _)) => LShape::Zero,
                    _ => LShape::Leaf(false),
                }
            }
            _ => LShape::Leaf(false),
        })
    }

    /// Whether two shapes have the same pair structure (leaves and zeros alike).
    fn same_pairs(&self, other: &LShape) -> bool {
        match (self, other) {
            (LShape::Pair(a, b), LShape::Pair(c, d)) => a.same_pairs(c) && b.same_pairs(d),
            (LShape::Pair(..), _) | (_, LShape::Pair(..)) => false,
            _ => true,
        }
    }

    fn merge(self, other: LShape) -> LShape {
        match (self, other) {
            (LShape::Zero, x) | (x, LShape::Zero) => x,
            (LShape::Leaf(a), LShape::Leaf(b)) => LShape::Leaf(a || b),
            (LShape::Pair(a, b), LShape::Pair(c, d)) => {
                LShape::Pair(Box::new(a.merge(*c)), Box::new(b.merge(*d)))
            }
            // A pair-valued term added into a pair node reaches both components.
            (LShape::Leaf(_), LShape::Pair(a, b)) | (LShape::Pair(a, b), LShape::Leaf(_)) => {
                LShape::Pair(
                    Box::new(LShape::Leaf(false).merge(*a)),
                    Box::new(LShape::Leaf(false).merge(*b)),
                )
            }
        }
    }

    fn count(&self) -> usize {
        match self {
            LShape::Pair(a, b) => a.count() + b.count(),
            _ => 1,
        }
    }

    /// The leaves, in order.
    fn leaves<'s>(&'s self, out: &mut Vec<&'s LShape>) {
        match self {
            LShape::Pair(a, b) => {
                a.leaves(out);
                b.leaves(out);
            }
            leaf => out.push(leaf),
        }
    }

    /// The node `path` leads to (`true` for `fst`), and the part of the path left over when a
    /// leaf is reached first.
    fn walk<'s, 'p>(&'s self, path: &'p [bool]) -> (&'s LShape, usize, &'p [bool]) {
        let (mut node, mut first) = (self, 0);
        for (k, &fst) in path.iter().enumerate() {
            match node {
                LShape::Pair(a, b) => {
                    if fst {
                        node = a;
                    } else {
                        first += a.count();
                        node = b;
                    }
                }
                _ => return (node, first, &path[k..]),
            }
        }
        (node, first, &[])
    }
}

/// Where a leaf of a linear term's value goes in an accumulation buffer: added into an
/// accumulator in place, or stored (the leaf's value).
#[derive(Clone, Copy)]
enum Tgt {
    Add(usize),
    Set(usize),
}

/// The slots of the `Set` targets among `tg`.
fn set_slots(tg: &[Tgt]) -> Vec<usize> {
    tg.iter()
        .filter_map(|t| match t {
            Tgt::Set(s) => Some(*s),
            Tgt::Add(_) => None,
        })
        .collect()
}

/// For [`Compiler::lin_let_forward`]: walks `t` (pairs, zeros and projections of the linear
/// variable `v`, whose value has shape `vshape`) along the position's `shape` and targets
/// `tg`, recording in `map` the target of each leaf of `v`'s value that `t` places, and in
/// `zeros` the stored targets `t` sets to zero. False if `t` is anything else, a projection
/// does not end at a node of `vshape` with the position's pair structure, or a leaf is placed
/// twice.
fn route(
    t: &LTerm,
    shape: &LShape,
    tg: &[Tgt],
    v: VarId,
    vshape: &LShape,
    map: &mut [Option<Tgt>],
    zeros: &mut Vec<usize>,
) -> bool {
    use LTermKind as K;
    match (&t.kind, shape) {
        (K::Pair(a, b), LShape::Pair(sa, sb)) => {
            let k = sa.count();
            route(a, sa, &tg[..k], v, vshape, map, zeros)
                && route(b, sb, &tg[k..], v, vshape, map, zeros)
        }
        (K::Zero(_), _) => {
            zeros.extend(set_slots(tg));
            true
        }
        (K::Var(_) | K::Fst(_) | K::Snd(_), _) => {
            let (path, root) = lin_path(t);
            if lin_var(root).is_none_or(|u| u.id != v) {
                return false;
            }
            let (node, first, rest) = vshape.walk(&path);
            if !rest.is_empty() || !node.same_pairs(shape) || node.count() != tg.len() {
                return false;
            }
            for (m, &target) in tg.iter().enumerate() {
                if map[first + m].replace(target).is_some() {
                    return false;
                }
            }
            true
        }
        _ => false,
    }
}

/// Adds or stores the leaves of a linear value.
type AFn = Box<dyn Fn(&mut Frame, &mut [Lin]) -> Result<()>>;

/// Sends `v`'s leaves along `shape` to their targets.
fn scatter(v: Lin, shape: &LShape, tg: &[Tgt], buf: &mut [Lin]) {
    match shape {
        LShape::Pair(a, b) => {
            let k = a.count();
            scatter(v.fst(), a, &tg[..k], buf);
            scatter(v.snd(), b, &tg[k..], buf);
        }
        _ => match tg[0] {
            Tgt::Add(j) => buf[j].add_in_place(v),
            Tgt::Set(j) => buf[j] = v,
        },
    }
}

/// The value with the given leaves along `shape` (moved out of `buf`).
fn assemble(shape: &LShape, leaf: &mut impl FnMut() -> Lin) -> Lin {
    match shape {
        LShape::Pair(a, b) => {
            let x = assemble(a, leaf);
            Lin::pair(x, assemble(b, leaf))
        }
        _ => leaf(),
    }
}

/// A linear array stored unzipped: its element shape and the slots of its columns (`None`
/// for a leaf that is always zero).
struct LinCols {
    shape: Rc<LShape>,
    cols: Vec<Option<VarId>>,
    /// Columns stored as their sum (every use of them sums them): see [`FlatUnzip`].
    summed: Vec<bool>,
}

/// `let lin xs = lbuild n (\i -> l)` stored as columns by a flat loop: the outputs of the
/// loop go to the columns' slots (a column only ever summed is stored as its sum).
struct FlatUnzip {
    lp: flat::FlatLoop,
    cols: Vec<Option<usize>>,
}

impl FlatUnzip {
    fn run(&self, fr: &mut Frame) -> Result<()> {
        let outs = self.lp.run(fr)?;
        for (v, slot) in outs.into_iter().zip(&self.cols) {
            if let Some(s) = slot {
                fr[*s] = Value::Lin(v);
            }
        }
        Ok(())
    }
}

/// `let lin xs = lbuild n (\i -> l)` stored as columns.
struct LinUnzip {
    n: IFn,
    var: usize,
    body: AFn,
    /// Buffer size; the element's leaves are at `0..cols.len()`.
    size: usize,
    cols: Vec<Option<usize>>,
    /// Columns kept as their running sum (their leaves' targets add; see
    /// [`Compiler::lin_unzip`]).
    summed: Vec<bool>,
    span: Span,
}

impl LinUnzip {
    fn run(&self, fr: &mut Frame) -> Result<()> {
        let n = value::check_len("lbuild", (self.n)(fr)?).map_err(|e| e.or_span(self.span))?;
        let stored = |j: usize| self.cols[j].is_some() && !self.summed[j];
        let mut cols: Vec<Vec<Lin>> = (0..self.cols.len())
            .map(|j| {
                if stored(j) {
                    Vec::with_capacity(n)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let mut buf = vec![Lin::zero(); self.size];
        for k in 0..n {
            fr[self.var] = Value::Int(k as i64);
            (self.body)(fr, &mut buf)?;
            for (j, col) in cols.iter_mut().enumerate() {
                if stored(j) {
                    col.push(std::mem::replace(&mut buf[j], Lin::zero()));
                }
            }
        }
        for (j, (col, slot)) in cols.into_iter().zip(&self.cols).enumerate() {
            if let Some(s) = slot {
                fr[*s] = Value::Lin(if self.summed[j] {
                    std::mem::replace(&mut buf[j], Lin::zero())
                } else {
                    Lin::array(col)
                });
            }
        }
        Ok(())
    }
}

impl Compiler {
    /// Compiles `l` to send the leaves of its value (along `shape`) to the targets `tg`:
    /// `Add` targets accumulate in place (a sum is split and a one-hot added at its index, so
    /// no array is built), `Set` targets receive the leaf's value. A sum over a node with
    /// `Set` leaves computes its right operand into fresh buffer slots (`size` counts them)
    /// and adds leafwise, so every stored leaf is computed exactly as [`Lin::plus`] on the
    /// whole values would.
    fn lin_into(&mut self, l: &LTerm, shape: &LShape, tg: &[Tgt], size: &mut usize) -> AFn {
        // As in `Compiler::nested`: every `RUN_CHECK`th level checks the stack when it runs.
        self.nest += 1;
        let code = deep(|| self.lin_into_node(l, shape, tg, size));
        self.nest -= 1;
        if self.nest % RUN_CHECK == 0 {
            let code = crate::deep::Deep::new(code);
            Box::new(move |fr, buf| deep(|| code(fr, buf)))
        } else {
            code
        }
    }

    fn lin_into_node(&mut self, l: &LTerm, shape: &LShape, tg: &[Tgt], size: &mut usize) -> AFn {
        use LTermKind as K;
        let span = l.span;
        let all_add = tg.iter().all(|t| matches!(t, Tgt::Add(_)));
        match (&l.kind, shape) {
            (K::Zero(_), _) => {
                let sets = set_slots(tg);
                Box::new(move |_, buf| {
                    for &s in &sets {
                        buf[s] = Lin::zero();
                    }
                    Ok(())
                })
            }
            (K::Let(..) | K::LinLet(..), _) => {
                if let Some(f) = self.lin_let_forward(l, shape, tg, size) {
                    return f;
                }
                let (steps, body) = self.linear_let_chain(l);
                let body = self.lin_into(body, shape, tg, size);
                Box::new(move |fr, buf| {
                    run_steps(&steps, fr)?;
                    body(fr, buf)
                })
            }
            (K::Pair(a, b), LShape::Pair(sa, sb)) => {
                let k = sa.count();
                let a = self.lin_into(a, sa, &tg[..k], size);
                let b = self.lin_into(b, sb, &tg[k..], size);
                Box::new(move |fr, buf| {
                    a(fr, buf)?;
                    b(fr, buf)
                })
            }
            (K::Plus(a, b), _) if all_add => {
                let a = self.lin_into(a, shape, tg, size);
                let b = self.lin_into(b, shape, tg, size);
                Box::new(move |fr, buf| {
                    a(fr, buf)?;
                    b(fr, buf)
                })
            }
            (K::Plus(a, b), LShape::Pair(..)) => {
                let mut pairs = Vec::new();
                let tg2: Vec<Tgt> = tg
                    .iter()
                    .map(|t| match *t {
                        Tgt::Add(j) => Tgt::Add(j),
                        Tgt::Set(s) => {
                            let s2 = *size;
                            *size += 1;
                            pairs.push((s, s2));
                            Tgt::Set(s2)
                        }
                    })
                    .collect();
                let a = self.lin_into(a, shape, tg, size);
                let b = self.lin_into(b, shape, &tg2, size);
                Box::new(move |fr, buf| {
                    a(fr, buf)?;
                    b(fr, buf)?;
                    for &(s, s2) in &pairs {
                        let y = std::mem::replace(&mut buf[s2], Lin::zero());
                        buf[s].add_in_place(y);
                    }
                    Ok(())
                })
            }
            // A nested sum: each element adds into the enclosing accumulators, as its one-hots
            // would into the sum's own (the same entries, so the same sparse or dense result),
            // with no array per element or per sum. A stored leaf is the sum itself: its slot
            // starts at zero and accumulates the elements' leaves (`lsum`'s fold from zero).
            (K::Sum(e), _) if let K::Build(n, i, body) = &e.kind => {
                // A length error is the lbuild's, at its position.
                let span = e.span;
                let sets = set_slots(tg);
                let into: Vec<usize> = tg
                    .iter()
                    .map(|t| match *t {
                        Tgt::Add(j) | Tgt::Set(j) => j,
                    })
                    .collect();
                // Flat, if the body is flat bindings ending in (a tuple of) sums of one-hots.
                let mut leaves = Vec::new();
                shape.leaves(&mut leaves);
                let sinks = sinks_of(&leaves, flat::Sink::Into);
                if LShape::of(body).same_pairs(shape)
                    && let Some(lp) = self.flat_loop(Some(n), Some(i), body, span, sinks)
                {
                    return Box::new(move |fr, buf| {
                        for &s in &sets {
                            buf[s] = Lin::zero();
                        }
                        let mut accs: SmallVec<[Lin; 4]> = into
                            .iter()
                            .map(|&j| std::mem::replace(&mut buf[j], Lin::zero()))
                            .collect();
                        let res = lp.run_into(fr, &mut accs);
                        for (&j, a) in into.iter().zip(accs) {
                            buf[j] = a;
                        }
                        res
                    });
                }
                let at = move |e: Error| e.or_span(span);
                let n = self.int(n);
                let adds: Vec<Tgt> = into.iter().map(|&j| Tgt::Add(j)).collect();
                let (s, body) = self.in_loop(|c| (c.bind(i), c.lin_into(body, shape, &adds, size)));
                Box::new(move |fr, buf| {
                    let n = value::check_len("lbuild", n(fr)?).map_err(at)?;
                    for &s in &sets {
                        buf[s] = Lin::zero();
                    }
                    for k in 0..n {
                        fr[s] = Value::Int(k as i64);
                        body(fr, buf)?;
                    }
                    Ok(())
                })
            }
            (K::OneHot(n, i, e), _) if all_add && tg.len() == 1 => {
                let Tgt::Add(j) = tg[0] else { unreachable!() };
                let at = move |e: Error| e.or_span(span);
                let n = self.int(n);
                let i = self.int(i);
                let e = self.linear(e);
                Box::new(move |fr, buf| {
                    let n = value::check_len("onehot", n(fr)?).map_err(at)?;
                    let i = i(fr)?;
                    let x = e(fr)?;
                    buf[j].add_one_hot_in_place(n, i, x).map_err(at)
                })
            }
            _ => {
                let e = self.linear(l);
                if let [t] = tg {
                    let t = *t;
                    return Box::new(move |fr, buf| {
                        let v = e(fr)?;
                        match t {
                            Tgt::Add(j) => buf[j].add_in_place(v),
                            Tgt::Set(j) => buf[j] = v,
                        }
                        Ok(())
                    });
                }
                let (shape, tg) = (shape.clone(), tg.to_vec());
                Box::new(move |fr, buf| {
                    scatter(e(fr)?, &shape, &tg, buf);
                    Ok(())
                })
            }
        }
    }

    /// `let .. in let lin v = e in t` where `t` is pairs, zeros and projections of `v` that
    /// take each leaf of `v`'s value once (`((0, fst v), snd v)`: a reverse derivative's
    /// cotangent of a loop body, rearranged into the enclosing tuple): `e` is compiled straight
    /// into the targets of the positions `t` sends its leaves to, so `v` is never built, and a
    /// one-hot or nested sum in `e` adds into the enclosing accumulators. `None` if the chain
    /// does not end so.
    fn lin_let_forward(
        &mut self,
        l: &LTerm,
        shape: &LShape,
        tg: &[Tgt],
        size: &mut usize,
    ) -> Option<AFn> {
        use LTermKind as K;
        let mut last = l;
        while let K::Let(_, _, b) | K::LinLet(_, _, b) = &last.kind
            && matches!(b.kind, K::Let(..) | K::LinLet(..))
        {
            last = b;
        }
        let K::LinLet(v, e, t) = &last.kind else {
            return None;
        };
        let vshape = LShape::of(e);
        if !matches!(vshape, LShape::Pair(..)) {
            return None;
        }
        let mut map = vec![None; vshape.count()];
        let mut zeros = Vec::new();
        if !route(t, shape, tg, v.id, &vshape, &mut map, &mut zeros) {
            return None;
        }
        let (steps, _) = self.linear_let_chain_into(l, None, Some(last));
        // A leaf nothing reads is still computed (its errors are the reference's), into a
        // slot of its own.
        let mapped: Vec<Tgt> = map
            .into_iter()
            .map(|t| {
                t.unwrap_or_else(|| {
                    *size += 1;
                    Tgt::Set(*size - 1)
                })
            })
            .collect();
        let e = self.lin_into(e, &vshape, &mapped, size);
        Some(Box::new(move |fr, buf| {
            run_steps(&steps, fr)?;
            e(fr, buf)?;
            for &s in &zeros {
                buf[s] = Lin::zero();
            }
            Ok(())
        }))
    }

    /// A `+`-tree with one-hot leaves outside an `lsum (lbuild ..)` (`onehot n 0 v + onehot n 1 v
    /// + ..`, the reverse derivative of a written-out index chain): run as the accumulation
    /// [`Compiler::lin_sum_build`] does for one element, so each one-hot adds into one array in
    /// place instead of allocating a sparse array per leaf and per sum. `None` without one-hots.
    fn lin_accumulate(&mut self, l: &LTerm) -> Option<LFn> {
        /// One-hots among the summands (through pairs and lets), counting up to `2`.
        fn one_hots(l: &LTerm) -> usize {
            deep(|| {
                use LTermKind as K;
                match &l.kind {
                    K::OneHot(..) => 1,
                    K::Plus(a, b) | K::Pair(a, b) => (one_hots(a) + one_hots(b)).min(2),
                    K::Let(_, _, b) | K::LinLet(_, _, b) => one_hots(b),
                    _ => 0,
                }
            })
        }
        // With a single one-hot, `Lin::plus` already adds it into the other summand in place.
        if one_hots(l) < 2 {
            return None;
        }
        let shape = LShape::of(l);
        let k = shape.count();
        let mut leaves = Vec::new();
        shape.leaves(&mut leaves);
        // Flat: the one-hots of flat linear reals are added into dense accumulators.
        let sinks = sinks_of(&leaves, flat::Sink::Sum);
        if let Some(lp) = self.flat_loop(None, None, l, l.span, sinks) {
            return Some(Box::new(move |fr| {
                let mut outs = lp.run(fr)?.into_iter();
                Ok(assemble(&shape, &mut || {
                    outs.next().expect("an output per leaf")
                }))
            }));
        }
        let mut size = k;
        let tg: Vec<Tgt> = leaves
            .iter()
            .enumerate()
            .map(|(j, leaf)| {
                if matches!(leaf, LShape::Leaf(true)) {
                    Tgt::Add(j)
                } else {
                    Tgt::Set(j)
                }
            })
            .collect();
        let body = self.lin_into(l, &shape, &tg, &mut size);
        Some(Box::new(move |fr| {
            let mut buf = vec![Lin::zero(); size];
            body(fr, &mut buf)?;
            let mut leaves = buf.drain(..k);
            Ok(assemble(&shape, &mut || {
                leaves.next().expect("a leaf per accumulator")
            }))
        }))
    }

    /// `lsum (lbuild n (\i -> l))` where `l` builds pairs or one-hot arrays: one accumulator
    /// per leaf of the pair structure, updated in place (a one-hot adds at its index, with no
    /// array built; other leaves add their value, computed as the reference evaluator would).
    fn lin_sum_build(&mut self, n: &Term, i: &Var, body: &LTerm, span: Span) -> Option<LFn> {
        let shape = LShape::of(body);
        if matches!(shape, LShape::Leaf(false) | LShape::Zero) {
            return None;
        }
        let k = shape.count();
        let mut leaves = Vec::new();
        shape.leaves(&mut leaves);
        let sinks = sinks_of(&leaves, flat::Sink::Sum);
        if let Some(lp) = self.flat_loop(Some(n), Some(i), body, span, sinks) {
            return Some(Box::new(move |fr| {
                let mut outs = lp.run(fr)?.into_iter();
                Ok(assemble(&shape, &mut || {
                    outs.next().expect("an output per leaf")
                }))
            }));
        }
        let mut size = k;
        let mut stored = Vec::new();
        let tg: Vec<Tgt> = leaves
            .iter()
            .enumerate()
            .map(|(j, leaf)| {
                if matches!(leaf, LShape::Leaf(true)) {
                    Tgt::Add(j)
                } else {
                    stored.push((j, size));
                    size += 1;
                    Tgt::Set(size - 1)
                }
            })
            .collect();
        let n = self.int(n);
        let (s, body) = self.in_loop(|c| (c.bind(i), c.lin_into(body, &shape, &tg, &mut size)));
        Some(Box::new(move |fr| {
            let n = value::check_len("lbuild", n(fr)?).map_err(|e| e.or_span(span))?;
            let mut buf = vec![Lin::zero(); size];
            for k in 0..n {
                fr[s] = Value::Int(k as i64);
                body(fr, &mut buf)?;
                for &(j, t) in &stored {
                    let y = std::mem::replace(&mut buf[t], Lin::zero());
                    buf[j].add_in_place(y);
                }
            }
            let mut leaves = buf.drain(..k);
            Ok(assemble(&shape, &mut || {
                leaves.next().expect("a leaf per accumulator")
            }))
        }))
    }

    /// `let lin xs = lbuild n (\i -> (.., ..))` whose every use in `scope` sums it
    /// (`lsum xs`, under projections), indexes it (`xs ! i`, under projections) or maps a
    /// leaf out (`lmap (\p ⊸ snd p) xs`): stored as one linear array per leaf of the element
    /// (no pairs built per element; a leaf that is always `0` costs nothing).
    fn lin_unzip(&mut self, u: &Var, l1: &LTerm, scope: &LTerm) -> Option<Step> {
        use LTermKind as K;
        let K::Build(n, i, body) = &l1.kind else {
            return None;
        };
        let shape = LShape::of(body);
        if !matches!(shape, LShape::Pair(..)) {
            return None;
        }
        if !lin_columns_suffice(u.id, &shape, scope, self.uses.get(&u.id).copied()) {
            return None;
        }
        let k = shape.count();
        let mut leaves = Vec::new();
        shape.leaves(&mut leaves);
        let ids: Vec<Option<VarId>> = leaves
            .iter()
            .map(|l| (!matches!(l, LShape::Zero)).then(VarId::fresh))
            .collect();
        // Flat: columns only ever summed are summed as the loop runs.
        let summed = lin_columns_summed(u.id, &shape, scope);
        let sinks = leaves
            .iter()
            .zip(&summed)
            .map(|(l, &sum)| match l {
                LShape::Zero => flat::Sink::Zero,
                _ if sum => flat::Sink::Sum,
                _ => flat::Sink::Column,
            })
            .collect();
        if let Some(lp) = self.flat_loop(Some(n), Some(i), body, l1.span, sinks) {
            let cols = ids.iter().map(|id| id.map(|id| self.bind_id(id))).collect();
            self.lin_unzipped.insert(
                u.id,
                LinCols {
                    shape: Rc::new(shape),
                    cols: ids,
                    summed,
                },
            );
            return Some(Step::FlatUnzip(Box::new(FlatUnzip { lp, cols })));
        }
        // A column only ever summed is a running sum: its leaf of every element adds into one
        // accumulator (so a nested sum in the element adds straight into it, and no column of
        // per-element values is kept), the fold from zero in order that `lsum` would compute.
        let summed: Vec<bool> = summed
            .iter()
            .zip(&ids)
            .map(|(&s, id)| s && id.is_some())
            .collect();
        let tg: Vec<Tgt> = (0..k)
            .map(|j| if summed[j] { Tgt::Add(j) } else { Tgt::Set(j) })
            .collect();
        let mut size = k;
        let n = self.int(n);
        let (var, body) = self.in_loop(|c| (c.bind(i), c.lin_into(body, &shape, &tg, &mut size)));
        let cols = ids.iter().map(|id| id.map(|id| self.bind_id(id))).collect();
        self.lin_unzipped.insert(
            u.id,
            LinCols {
                shape: Rc::new(shape),
                cols: ids,
                summed: summed.clone(),
            },
        );
        Some(Step::LinUnzip(Box::new(LinUnzip {
            n,
            var,
            body,
            size,
            cols,
            summed,
            span: l1.span,
        })))
    }

    /// A use of an unzipped linear array (see [`Compiler::lin_unzip`]), if `l` is one.
    fn lin_column_use(&mut self, l: &LTerm) -> Option<LFn> {
        use LTermKind as K;
        let (path, root) = lin_path(l);
        let (x, kind) = match &root.kind {
            K::Sum(e) => (lin_var(e)?, ColUse::Sum),
            K::Index(e, i) => (lin_var(e)?, ColUse::Index(i)),
            K::Map(f, e) if path.is_empty() => (lin_var(e)?, ColUse::Map(f)),
            _ => return None,
        };
        let info = self.lin_unzipped.get(&x.id)?;
        let shape = info.shape.clone();
        let cols = info.cols.clone();
        let summed = info.summed.clone();
        // A map reads the leaf its function's projections reach.
        let path_owned: Vec<bool> = match &kind {
            ColUse::Map(f) => match &f.kind {
                TermKind::LinLam(_, body) => lin_path(body).0,
                _ => unreachable!("checked by lin_columns_suffice"),
            },
            _ => path.clone(),
        };
        let (node, first, rest) = shape.walk(&path_owned);
        let node = node.clone();
        let rest: Vec<bool> = rest.to_vec();
        let n_leaves = node.count();
        let slots: Vec<Option<usize>> = cols[first..first + n_leaves]
            .iter()
            .map(|c| c.map(|id| self.read_id(id).0))
            .collect();
        let summed: Vec<bool> = summed[first..first + n_leaves].to_vec();
        let project = move |mut v: Lin| {
            for &fst in &rest {
                v = if fst { v.fst() } else { v.snd() };
            }
            v
        };
        let col = |fr: &Frame, s: usize| match &fr[s] {
            Value::Lin(x) => x.clone(),
            other => panic!("internal error: expected a linear column, found {other}"),
        };
        Some(match kind {
            ColUse::Sum => Box::new(move |fr| {
                let mut it = slots.iter().zip(&summed);
                let v = assemble(&node, &mut || match it.next().expect("a column") {
                    // Stored summed already.
                    (Some(s), true) => col(fr, *s),
                    (Some(s), false) => col(fr, *s).sum(),
                    (None, _) => Lin::zero(),
                });
                Ok(project(v))
            }),
            ColUse::Index(i) => {
                let i = self.int(i);
                Box::new(move |fr| {
                    let i = i(fr)?;
                    let mut it = slots.iter();
                    let v = assemble(&node, &mut || match it.next().expect("a column") {
                        Some(s) => col(fr, *s).index(i),
                        None => Lin::zero(),
                    });
                    Ok(project(v))
                })
            }
            ColUse::Map(_) => {
                // The checker admitted only maps reaching a leaf exactly.
                let s = slots[0];
                Box::new(move |fr| Ok(s.map_or_else(Lin::zero, |s| col(fr, s))))
            }
        })
    }
}

enum ColUse<'t> {
    Sum,
    Index(&'t Term),
    Map(&'t Term),
}

/// `l` as projections (outermost first, `true` for `fst`) of a root.
fn lin_path(l: &LTerm) -> (Vec<bool>, &LTerm) {
    let mut path = Vec::new();
    let mut cur = l;
    loop {
        match &cur.kind {
            LTermKind::Fst(e) => {
                path.push(true);
                cur = e;
            }
            LTermKind::Snd(e) => {
                path.push(false);
                cur = e;
            }
            _ => {
                // Innermost projection first, as the shape is walked from the root.
                path.reverse();
                return (path, cur);
            }
        }
    }
}

fn lin_var(l: &LTerm) -> Option<&Var> {
    match &l.kind {
        LTermKind::Var(x) => Some(x),
        _ => None,
    }
}

/// For `\p ⊸ body`: whether `body` is projections of `p` reaching a leaf of `shape` exactly.
fn lin_map_reaches_leaf(shape: &LShape, f: &Term) -> bool {
    let TermKind::LinLam(p, body) = &f.kind else {
        return false;
    };
    let (path, root) = lin_path(body);
    if !matches!(&root.kind, LTermKind::Var(y) if y.id == p.id) {
        return false;
    }
    let (node, _, rest) = shape.walk(&path);
    rest.is_empty() && !matches!(node, LShape::Pair(..))
}

/// Whether all `uses` occurrences of `x` are in `scope` and served by columns: `lsum x` or
/// `x ! i` under projections, `lmap` of a projection reaching a leaf.
fn lin_columns_suffice(x: VarId, shape: &LShape, scope: &LTerm, uses: Option<u32>) -> bool {
    use LTermKind as K;
    let is_x = |l: &LTerm| matches!(&l.kind, K::Var(y) if y.id == x);
    let mut served = 0;
    let mut stack = vec![Child::L(scope)];
    while let Some(c) = stack.pop() {
        let l = match c {
            Child::C(t) => {
                stack.extend(t.children());
                continue;
            }
            Child::L(l) => l,
        };
        let (path, root) = lin_path(l);
        match &root.kind {
            K::Sum(e) if is_x(e) => {
                served += 1;
                continue;
            }
            K::Index(e, i) if is_x(e) => {
                served += 1;
                stack.push(Child::C(i));
                continue;
            }
            K::Map(f, e) if is_x(e) && path.is_empty() => {
                if !lin_map_reaches_leaf(shape, f) {
                    return false;
                }
                served += 1;
                stack.push(Child::C(f));
                continue;
            }
            K::Var(y) if y.id == x => return false,
            _ => {}
        }
        stack.extend(l.children());
    }
    Some(served) == uses
}

/// For each leaf of `shape` (the element of the unzipped linear array `x`): whether every use
/// of `x` in `scope` that reaches it sums it (`lsum x` under projections), so that its column
/// can be kept as a running sum. Assumes [`lin_columns_suffice`].
fn lin_columns_summed(x: VarId, shape: &LShape, scope: &LTerm) -> Vec<bool> {
    use LTermKind as K;
    let is_x = |l: &LTerm| matches!(&l.kind, K::Var(y) if y.id == x);
    let mut summed = vec![true; shape.count()];
    let mut stack = vec![Child::L(scope)];
    while let Some(c) = stack.pop() {
        let l = match c {
            Child::C(t) => {
                stack.extend(t.children());
                continue;
            }
            Child::L(l) => l,
        };
        let (path, root) = lin_path(l);
        let path = match &root.kind {
            K::Sum(e) if is_x(e) => continue,
            K::Index(e, i) if is_x(e) => {
                stack.push(Child::C(i));
                path
            }
            K::Map(f, e) if is_x(e) => {
                stack.push(Child::C(f));
                match &f.kind {
                    TermKind::LinLam(_, body) => lin_path(body).0,
                    _ => Vec::new(),
                }
            }
            _ => {
                stack.extend(l.children());
                continue;
            }
        };
        let (node, first, _) = shape.walk(&path);
        for s in &mut summed[first..first + node.count()] {
            *s = false;
        }
    }
    summed
}
