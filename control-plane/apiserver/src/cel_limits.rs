//! What keeps CEL (CRD `x-kubernetes-validations` rules, ValidatingAdmissionPolicy
//! expressions) from freezing the server, as upstream does:
//!
//! - an **estimated cost** at creation ([`rule_cost_errors`]): list, map and string sizes come
//!   from the schema's `maxItems` / `maxProperties` / `maxLength`; where the schema sets none,
//!   the size is what fits in the largest request (3 MiB) — nested comprehensions multiply.
//!   A rule over [`ESTIMATED_EXPRESSION_LIMIT`], or a schema whose rules together (each times how often it
//!   can run, from the sizes of the lists above it) exceed [`PER_CRD_LIMIT`], is refused;
//! - an **actual cost limit** while evaluating ([`execute`]): every comprehension step is
//!   counted (its body's size); past [`PER_CALL_LIMIT`] for one expression, or
//!   [`RUNTIME_BUDGET`] for all the expressions run for one object (or one policy binding),
//!   evaluation stops with an error — the interpreter is cancelled at the next step;
//! - evaluation **off the async workers** ([`offload`]): on a thread of its own (tokio's
//!   `block_in_place`), at most [`TENANT_EVALUATIONS`] at once per tenant and half the cores in
//!   all, so one tenant's rules cannot hold the workers (or the cores) every other tenant's
//!   requests run on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr};
use serde_json::Value;

/// The most cost one expression may use (upstream `PerCallLimit`, "roughly 0.1 second").
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// The most cost all the expressions evaluated for one object, or one policy binding, may use
/// (upstream `RuntimeCELCostBudget`).
pub const RUNTIME_BUDGET: u64 = 10_000_000;

/// The most estimated cost of one expression (upstream `StaticEstimatedCostLimit`): rules are
/// refused at creation above it. (The actual cost of an evaluation is held to
/// [`PER_CALL_LIMIT`]; the estimate assumes every list at its largest.)
pub const ESTIMATED_EXPRESSION_LIMIT: f64 = 10_000_000.0;

/// The most estimated cost of all the rules of one CRD schema, each times its cardinality
/// (upstream `StaticEstimatedCRDCostLimit`).
pub const PER_CRD_LIMIT: f64 = 100_000_000.0;

/// The size an unbounded list, map or string is estimated from (upstream: the largest request).
const MAX_REQUEST_BYTES: f64 = 3.0 * 1024.0 * 1024.0;

/// How many CEL evaluations one tenant runs at once.
pub const TENANT_EVALUATIONS: usize = 1;

/// How many CEL evaluations run at once in all (half the cores, at least one): the other
/// cores stay free for requests that run no CEL, whoever sends them.
fn total_evaluations() -> usize {
    (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1)
}

/// The longest a tenant's evaluation waits for one of its [`TENANT_EVALUATIONS`] slots.
const SLOT_WAIT: Duration = Duration::from_secs(5);

/// The message of an evaluation stopped by its cost limit (upstream's wording).
pub const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// The message once the budget of an object (or binding) is spent (upstream's wording).
pub const BUDGET_EXCEEDED: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

const TICK: &str = "__fabrik_cost";

/// The cost left for the expressions evaluated for one object (or one policy binding).
#[derive(Debug)]
pub struct Budget {
    left: AtomicU64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(RUNTIME_BUDGET)
    }
}

impl Budget {
    /// A budget of `cost`.
    pub fn new(cost: u64) -> Budget {
        Budget {
            left: AtomicU64::new(cost),
        }
    }

    /// Whether nothing is left.
    pub fn spent(&self) -> bool {
        self.left.load(Ordering::Relaxed) == 0
    }

    fn charge(&self, cost: u64) -> bool {
        let mut ok = true;
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                ok = left >= cost;
                Some(left.saturating_sub(cost))
            });
        ok
    }
}

/// Nodes of `e`, not counting the loops of nested comprehensions (they count themselves).
fn nodes(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Call(c) => {
            1 + c.target.as_deref().map_or(0, nodes) + c.args.iter().map(nodes).sum::<u64>()
        }
        Expr::Comprehension(c) => 1 + nodes(&c.iter_range) + nodes(&c.accu_init) + nodes(&c.result),
        Expr::List(l) => 1 + l.elements.iter().map(nodes).sum::<u64>(),
        Expr::Map(m) => 1 + m.entries.iter().map(entry_nodes).sum::<u64>(),
        Expr::Struct(s) => 1 + s.entries.iter().map(entry_nodes).sum::<u64>(),
        Expr::Select(s) => 1 + nodes(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 1,
    }
}

fn entry_nodes(e: &cel::common::ast::IdedEntryExpr) -> u64 {
    match &e.expr {
        EntryExpr::StructField(f) => nodes(&f.value),
        EntryExpr::MapEntry(m) => nodes(&m.key) + nodes(&m.value),
    }
}

/// Wraps `e` in a call that counts `weight` each time it is evaluated.
fn tick(e: &mut IdedExpr, weight: u64) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(cel::common::ast::CallExpr {
            func_name: format!("{TICK}_{weight}"),
            target: None,
            args: vec![inner],
        }),
    };
}

/// Makes every comprehension count its steps: its loop condition (evaluated once per step)
/// is wrapped in a counting call. `map` / `filter` (whose condition is the constant `true`)
/// have their element (or guard) wrapped instead, so the interpreter keeps their fast path.
/// Returns the weights used.
fn instrument(e: &mut IdedExpr, weights: &mut Vec<u64>) {
    match &mut e.expr {
        Expr::Call(c) => {
            if let Some(t) = c.target.as_deref_mut() {
                instrument(t, weights);
            }
            for a in &mut c.args {
                instrument(a, weights);
            }
        }
        Expr::Comprehension(c) => {
            let weight = (nodes(&c.loop_cond) + nodes(&c.loop_step)).max(1);
            instrument(&mut c.iter_range, weights);
            instrument(&mut c.accu_init, weights);
            instrument(&mut c.loop_cond, weights);
            instrument(&mut c.loop_step, weights);
            instrument(&mut c.result, weights);
            if !weights.contains(&weight) {
                weights.push(weight);
            }
            if !matches!(c.loop_cond.expr, Expr::Literal(_)) {
                tick(&mut c.loop_cond, weight);
                return;
            }
            // `cond ? @result + [x] : @result` or `@result + [x]`.
            if let Expr::Call(step) = &mut c.loop_step.expr {
                if step.func_name == operators::CONDITIONAL {
                    if let Some(guard) = step.args.first_mut() {
                        tick(guard, weight);
                        // Steps the guard skips are counted; so are those it keeps.
                        return;
                    }
                }
                if step.func_name == operators::ADD {
                    if let Some(Expr::List(l)) = step.args.get_mut(1).map(|a| &mut a.expr) {
                        if let Some(first) = l.elements.first_mut() {
                            tick(first, weight);
                            return;
                        }
                    }
                }
            }
            tick(&mut c.loop_cond, weight);
        }
        Expr::List(l) => {
            for x in &mut l.elements {
                instrument(x, weights);
            }
        }
        Expr::Map(m) => {
            for x in &mut m.entries {
                instrument_entry(x, weights);
            }
        }
        Expr::Struct(s) => {
            for x in &mut s.entries {
                instrument_entry(x, weights);
            }
        }
        Expr::Select(s) => instrument(&mut s.operand, weights),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn instrument_entry(e: &mut cel::common::ast::IdedEntryExpr, weights: &mut Vec<u64>) {
    match &mut e.expr {
        EntryExpr::StructField(f) => instrument(&mut f.value, weights),
        EntryExpr::MapEntry(m) => {
            instrument(&mut m.key, weights);
            instrument(&mut m.value, weights);
        }
    }
}

/// Evaluates `program` in `ctx` with the actual cost counted: fails with [`COST_EXCEEDED`]
/// past [`PER_CALL_LIMIT`], and with [`BUDGET_EXCEEDED`] once `budget` is spent.
pub fn execute(
    program: &cel::Program,
    ctx: &mut cel::Context<'_, '_>,
    budget: &Budget,
) -> Result<cel::Value, String> {
    if budget.spent() {
        return Err(BUDGET_EXCEEDED.into());
    }
    let mut expr = program.expression().clone();
    let mut weights = Vec::new();
    instrument(&mut expr, &mut weights);
    let used = Arc::new(AtomicU64::new(nodes(&expr)));
    for weight in weights {
        let used = used.clone();
        let counter = move |v: cel::Value| -> Result<cel::Value, cel::ExecutionError> {
            let now = used.fetch_add(weight, Ordering::Relaxed) + weight;
            if now > PER_CALL_LIMIT {
                return Err(cel::ExecutionError::function_error(TICK, COST_EXCEEDED));
            }
            Ok(v)
        };
        ctx.add_function(&format!("{TICK}_{weight}"), counter)
            .map_err(|e| format!("cannot count the cost: {e:?}"))?;
    }
    let result = ctx.resolve(&expr);
    let cost = used.load(Ordering::Relaxed);
    if cost > PER_CALL_LIMIT {
        // Even where an error was absorbed (`err || true`), the limit stands.
        budget.charge(cost);
        return Err(COST_EXCEEDED.into());
    }
    if !budget.charge(cost) {
        return Err(BUDGET_EXCEEDED.into());
    }
    result.map_err(|e| format!("evaluation error: {e}"))
}

/// Seats of concurrent evaluations per tenant.
struct Slots {
    busy: Mutex<HashMap<String, usize>>,
    freed: Condvar,
}

fn slots() -> &'static Slots {
    static SLOTS: OnceLock<Slots> = OnceLock::new();
    SLOTS.get_or_init(|| Slots {
        busy: Mutex::new(HashMap::new()),
        freed: Condvar::new(),
    })
}

struct Slot(String);

impl Drop for Slot {
    fn drop(&mut self) {
        let s = slots();
        let mut busy = s.busy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = busy.get_mut(&self.0) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                busy.remove(&self.0);
            }
        }
        drop(busy);
        s.freed.notify_all();
    }
}

fn take_slot(tenant: &str) -> Result<Slot, String> {
    let s = slots();
    let deadline = Instant::now() + SLOT_WAIT;
    let mut busy = s.busy.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let total: usize = busy.values().sum();
        let n = busy.entry(tenant.to_string()).or_default();
        if *n < TENANT_EVALUATIONS && total < total_evaluations() {
            *n += 1;
            return Ok(Slot(tenant.to_string()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "too many CEL evaluations in progress for this cluster (at most {TENANT_EVALUATIONS} at once); please try again later"
            ));
        }
        busy = s
            .freed
            .wait_timeout(busy, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Runs CEL evaluation `f` off the async workers (on a multi-threaded runtime: tokio's
/// `block_in_place`; otherwise in place), holding one of the current tenant's
/// [`TENANT_EVALUATIONS`] slots. Fails when no slot frees up in time.
pub fn offload<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let tenant = crate::fairness::current_tenant().unwrap_or_default();
    let run = move || -> Result<T, String> {
        let _slot = take_slot(&tenant)?;
        Ok(f())
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(run)
        }
        _ => run(),
    }
}

// ---- estimated cost ----

/// Sizes of the values an expression may reach: the schema node a variable is bound to.
type Vars<'s> = HashMap<String, Option<&'s Value>>;

/// The schema's bound on the size of a value it describes (items, properties or characters),
/// or the number that fits in the largest request.
fn max_size(schema: Option<&Value>, unknown: f64) -> f64 {
    let Some(s) = schema else {
        return unknown;
    };
    let bound = |k: &str| s.get(k).and_then(Value::as_f64);
    match s["type"].as_str() {
        Some("array") => bound("maxItems").unwrap_or_else(|| unbounded(s.get("items"))),
        Some("string") => bound("maxLength").unwrap_or(MAX_REQUEST_BYTES),
        Some("object") => bound("maxProperties").unwrap_or_else(|| {
            // A map: each entry takes at least `"":` and its value.
            MAX_REQUEST_BYTES / (3.0 + min_size(s.get("additionalProperties")) + 1.0)
        }),
        _ => unknown,
    }
}

/// Upstream's estimate of an unbounded list: the largest request over the smallest element.
fn unbounded(items: Option<&Value>) -> f64 {
    MAX_REQUEST_BYTES / (min_size(items) + 1.0)
}

/// The fewest bytes a value of `schema` takes in JSON: `""`, `[]`, `{}` plus, for an object,
/// each required property (`"name":` and its own smallest value, and a comma).
fn min_size(schema: Option<&Value>) -> f64 {
    min_size_at(schema, 0)
}

fn min_size_at(schema: Option<&Value>, depth: usize) -> f64 {
    let Some(s) = schema else {
        return 1.0;
    };
    match s["type"].as_str() {
        Some("object") if depth < 16 => {
            2.0 + s["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|name| {
                    name.len() as f64 + 4.0 + min_size_at(s["properties"].get(name), depth + 1)
                })
                .sum::<f64>()
        }
        Some("string" | "object" | "array") => 2.0,
        _ => 1.0,
    }
}

fn child<'s>(schema: Option<&'s Value>, field: &str) -> Option<&'s Value> {
    let s = schema?;
    s["properties"]
        .get(field)
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

fn element(schema: Option<&Value>) -> Option<&Value> {
    let s = schema?;
    s.get("items")
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// The schema node `e` evaluates to, where it can be told.
fn schema_of<'s>(e: &IdedExpr, vars: &Vars<'s>) -> Option<&'s Value> {
    match &e.expr {
        Expr::Ident(name) => vars.get(name).copied().flatten(),
        Expr::Select(s) if !s.test => child(schema_of(&s.operand, vars), &s.field),
        Expr::Call(c) if c.func_name == operators::INDEX && c.target.is_none() => {
            element(c.args.first().and_then(|a| schema_of(a, vars)))
        }
        _ => None,
    }
}

/// The most elements `e` (a list, map or string) may have.
fn size_of(e: &IdedExpr, vars: &Vars<'_>, unknown: f64) -> f64 {
    match &e.expr {
        Expr::List(l) => l.elements.len() as f64,
        Expr::Map(m) => m.entries.len() as f64,
        // `map` / `filter` results are as large as what they iterate over.
        Expr::Comprehension(c) => size_of(&c.iter_range, vars, unknown),
        Expr::Call(c) if c.func_name == operators::ADD => c
            .args
            .iter()
            .map(|a| size_of(a, vars, unknown))
            .sum::<f64>(),
        _ => max_size(schema_of(e, vars), unknown),
    }
}

/// The estimated cost of `e`: one per node, each comprehension's body times the most elements
/// it iterates over. `unknown` is the size assumed where nothing bounds it.
fn estimate(e: &IdedExpr, vars: &Vars<'_>, unknown: f64) -> f64 {
    match &e.expr {
        Expr::Call(c) => {
            // As cel-go's estimator: logical operators cost only their operands.
            let own = match c.func_name.as_str() {
                operators::LOGICAL_AND
                | operators::LOGICAL_OR
                | operators::LOGICAL_NOT
                | operators::CONDITIONAL
                | operators::NOT_STRICTLY_FALSE => 0.0,
                _ => 1.0,
            };
            own + c
                .target
                .as_deref()
                .map_or(0.0, |t| estimate(t, vars, unknown))
                + c.args
                    .iter()
                    .map(|a| estimate(a, vars, unknown))
                    .sum::<f64>()
        }
        Expr::Comprehension(c) => {
            let n = size_of(&c.iter_range, vars, unknown);
            let mut inner = vars.clone();
            let range_schema = schema_of(&c.iter_range, vars);
            let is_list = range_schema.is_some_and(|s| s["type"] == "array")
                || matches!(c.iter_range.expr, Expr::List(_));
            // Over a list the variable is an element; over a map, a key (a string).
            inner.insert(
                c.iter_var.clone(),
                if is_list { element(range_schema) } else { None },
            );
            if let Some(v2) = &c.iter_var2 {
                inner.insert(v2.clone(), element(range_schema));
            }
            inner.insert(c.accu_var.clone(), None);
            estimate(&c.iter_range, vars, unknown)
                + estimate(&c.accu_init, vars, unknown)
                + estimate(&c.result, &inner, unknown)
                + n * (estimate(&c.loop_cond, &inner, unknown)
                    + estimate(&c.loop_step, &inner, unknown))
        }
        Expr::List(l) => {
            1.0 + l
                .elements
                .iter()
                .map(|x| estimate(x, vars, unknown))
                .sum::<f64>()
        }
        Expr::Map(m) => {
            1.0 + m
                .entries
                .iter()
                .map(|x| match &x.expr {
                    EntryExpr::MapEntry(me) => {
                        estimate(&me.key, vars, unknown) + estimate(&me.value, vars, unknown)
                    }
                    EntryExpr::StructField(f) => estimate(&f.value, vars, unknown),
                })
                .sum::<f64>()
        }
        Expr::Struct(s) => {
            1.0 + s
                .entries
                .iter()
                .map(|x| match &x.expr {
                    EntryExpr::MapEntry(me) => {
                        estimate(&me.key, vars, unknown) + estimate(&me.value, vars, unknown)
                    }
                    EntryExpr::StructField(f) => estimate(&f.value, vars, unknown),
                })
                .sum::<f64>()
        }
        Expr::Select(s) => 1.0 + estimate(&s.operand, vars, unknown),
        Expr::Ident(_) => 1.0,
        // Constants cost nothing (cel-go's estimator too).
        Expr::Literal(_) | Expr::Unspecified => 0.0,
    }
}

/// The estimated cost of a CRD rule `text` at schema node `schema` (`self`, and `oldSelf`).
pub fn rule_cost(text: &str, schema: &Value) -> Option<f64> {
    let program = std::panic::catch_unwind(|| cel::Program::compile(text))
        .ok()?
        .ok()?;
    let mut vars = Vars::new();
    vars.insert("self".into(), Some(schema));
    vars.insert("oldSelf".into(), Some(schema));
    Some(estimate(program.expression(), &vars, unbounded(None)))
}

/// The estimated cost of a policy expression. Its variables (`object`, `request`...) have no
/// schema here, so only what the expression itself bounds (literal lists) is counted; the
/// actual cost limit covers the rest at evaluation.
pub fn expression_cost(text: &str) -> Option<f64> {
    let program = std::panic::catch_unwind(|| cel::Program::compile(text))
        .ok()?
        .ok()?;
    Some(estimate(program.expression(), &Vars::new(), 1.0))
}

/// How a cost over a limit is reported (upstream's wording).
pub fn over_budget(cost: f64, limit: f64) -> String {
    format!(
        "estimated rule cost exceeds budget by factor of {:.1}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        cost / limit
    )
}

/// The rules of a CRD schema over budget: `(schema path of the rule, message)`, the path
/// ending in `x-kubernetes-validations[i].rule`; and, if all rules together (each times its
/// cardinality) exceed [`PER_CRD_LIMIT`], one entry for the root (path `""`).
pub fn rule_cost_errors(schema: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut total = 0.0;
    cost_walk(schema, "", 1.0, 0, &mut total, &mut out);
    if total > PER_CRD_LIMIT {
        out.push((
            String::new(),
            format!(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of {:.1}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
                total / PER_CRD_LIMIT
            ),
        ));
    }
    out
}

fn cost_walk(
    schema: &Value,
    path: &str,
    cardinality: f64,
    depth: usize,
    total: &mut f64,
    out: &mut Vec<(String, String)>,
) {
    if depth > 64 {
        return;
    }
    for (i, rule) in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let text = rule["rule"].as_str().unwrap_or("");
        let Some(cost) = rule_cost(text, schema) else {
            continue;
        };
        if cost > ESTIMATED_EXPRESSION_LIMIT {
            out.push((
                format!("{path}.x-kubernetes-validations[{i}].rule"),
                over_budget(cost, ESTIMATED_EXPRESSION_LIMIT),
            ));
        }
        *total += cost * cardinality;
    }
    for (k, s) in schema["properties"].as_object().into_iter().flatten() {
        cost_walk(
            s,
            &format!("{path}.properties[{k}]"),
            cardinality,
            depth + 1,
            total,
            out,
        );
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        let n = max_size(Some(schema), 1.0);
        cost_walk(
            items,
            &format!("{path}.items"),
            cardinality * n,
            depth + 1,
            total,
            out,
        );
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        let n = max_size(Some(schema), 1.0);
        cost_walk(
            extra,
            &format!("{path}.additionalProperties"),
            cardinality * n,
            depth + 1,
            total,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(max: Option<u64>) -> Value {
        let mut s = json!({"type": "array", "items": {"type": "string", "maxLength": 8}});
        if let Some(m) = max {
            s["maxItems"] = json!(m);
        }
        json!({"type": "object", "properties": {"items": s}})
    }

    const NESTED: &str =
        "self.items.all(a, self.items.all(b, self.items.all(c, a + b + c != 'x')))";

    #[test]
    fn nested_comprehensions_multiply_the_estimate() {
        // 150 items each: 150^3 steps, far over the per-call limit.
        let cost = rule_cost(NESTED, &list(Some(150))).unwrap_or(0.0);
        assert!(cost > PER_CALL_LIMIT as f64 * 10.0, "{cost}");
        // Unbounded: estimated from the largest request, worse still.
        let unbounded = rule_cost(NESTED, &list(None)).unwrap_or(0.0);
        assert!(unbounded > cost);
        // One loop over 150 items is cheap.
        let one = rule_cost("self.items.all(a, a != 'x')", &list(Some(150))).unwrap_or(f64::MAX);
        assert!(one < 2_000.0, "{one}");
        let errs = rule_cost_errors(&list(Some(150)));
        assert!(errs.is_empty(), "{errs:?}");
        let mut bad = list(Some(150));
        bad["x-kubernetes-validations"] =
            json!([{"rule": "size(self.items) > 0"}, {"rule": NESTED}]);
        let errs = rule_cost_errors(&bad);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].0, ".x-kubernetes-validations[1].rule");
        assert!(errs[0].1.contains("exceeds budget"), "{}", errs[0].1);
    }

    #[test]
    fn rules_on_items_count_once_per_possible_item_toward_the_crd_total() {
        // 2,000 rules-worth on every item of an unbounded list of objects: over the total.
        let cheap_but_many = json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "object", "properties": {"s": {"type": "array", "maxItems": 100, "items": {"type": "integer"}}},
                "x-kubernetes-validations": [{"rule": "self.s.all(x, x > 0 && x < 10 && x != 5)"}]}}}});
        let errs = rule_cost_errors(&cheap_but_many);
        assert!(
            errs.iter()
                .any(|(p, m)| p.is_empty() && m.contains("entire OpenAPIv3 schema")),
            "{errs:?}"
        );
    }

    #[test]
    fn evaluation_stops_at_the_cost_limit() {
        let items: Vec<String> = (0..150).map(|i| format!("v{i}")).collect();
        let program = cel::Program::compile(NESTED).ok();
        let Some(program) = program else {
            panic!("the rule compiles");
        };
        let mut ctx = cel::Context::default();
        let me = cel::to_value(json!({"items": items})).ok();
        ctx.add_variable_from_value("self", me.unwrap_or(cel::Value::Null));
        let started = Instant::now();
        let out = execute(&program, &mut ctx, &Budget::default());
        assert_eq!(out.err().as_deref(), Some(COST_EXCEEDED));
        // Stopped early: the 150^3 steps take tens of seconds in a debug build, the limit about
        // one (a tenth of that in a release build).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );

        // Cheap rules still evaluate, map/filter included.
        let ok = cel::Program::compile("self.items.map(x, x + 'a').filter(y, y != 'v1a').size() == 149 && self.items.exists(x, x == 'v3')").ok();
        let Some(ok) = ok else {
            panic!("the rule compiles");
        };
        let mut ctx = cel::Context::default();
        let me =
            cel::to_value(json!({"items": (0..150).map(|i| format!("v{i}")).collect::<Vec<_>>()}))
                .ok();
        ctx.add_variable_from_value("self", me.unwrap_or(cel::Value::Null));
        let budget = Budget::default();
        assert_eq!(execute(&ok, &mut ctx, &budget), Ok(cel::Value::Bool(true)));
        assert!(!budget.spent());
    }

    #[test]
    fn an_absorbed_error_does_not_escape_the_limit() {
        let text = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, true)) || true";
        let program = cel::Program::compile(text).ok();
        let Some(program) = program else {
            panic!("compiles");
        };
        let mut ctx = cel::Context::default();
        let tiny = Budget::new(5);
        let out = execute(&program, &mut ctx, &tiny);
        assert_eq!(out.err().as_deref(), Some(BUDGET_EXCEEDED));
        assert!(tiny.spent());
        // A literal-bounded bomb is caught by the estimate of a policy expression.
        let bomb: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        let l = format!("[{}]", bomb.join(","));
        let text = format!("{l}.all(a, {l}.all(b, {l}.all(c, a + b + c >= 0)))");
        assert!(expression_cost(&text).unwrap_or(0.0) > ESTIMATED_EXPRESSION_LIMIT);
        assert!(
            expression_cost("object.spec.containers.all(c, has(c.resources))").unwrap_or(f64::MAX)
                < 100.0
        );
    }
}
