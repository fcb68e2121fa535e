//! Which parameters the ascent perturbs: all, or those a list of names picks
//! ([`SamConfig::perturb_only`](crate::SamConfig::perturb_only)).

use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::error::SamError;

/// The parameters [`SamConfig::perturb_only`](crate::SamConfig::perturb_only) picks in
/// `module` (`None`: all of them), an error when it names some and picks none.
pub(crate) fn perturbed_params<B: Backend, M: Module<B>>(
    module: &M,
    names: Option<&[String]>,
) -> Result<Option<HashSet<ParamId>>, SamError> {
    let Some(names) = names else {
        return Ok(None);
    };
    let ids = picked(module, names);
    if ids.is_empty() {
        let names = names.to_vec();
        return Err(SamError::NothingPicked { names });
    }
    Ok(Some(ids))
}

/// The ids of the float parameters of `module` that `names` picks: a parameter is picked when
/// one of the modules around it has a type named in `names` (`BatchNorm`, `LayerNorm`), or
/// when its dotted path starts with a name at a component boundary (`norm` picks
/// `norm.gamma`, `layers.0` picks `layers.0.weight`, not `layers.01.weight`).
pub(crate) fn picked<B: Backend, M: Module<B>>(module: &M, names: &[String]) -> HashSet<ParamId> {
    let mut picker = Picker {
        names,
        path: Vec::new(),
        types: Vec::new(),
        picked: HashSet::new(),
    };
    module.visit(&mut picker);
    picker.picked
}

struct Picker<'a> {
    names: &'a [String],
    path: Vec<String>,
    types: Vec<String>,
    picked: HashSet<ParamId>,
}

impl Picker<'_> {
    fn picks(&self) -> bool {
        let path = self.path.join(".");
        self.names.iter().any(|name| {
            self.types.iter().any(|ty| ty == name)
                || path == *name
                || path
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    }
}

// Burn calls `enter_module(field, container)` around every field, parameters included, with
// the type of the struct that holds the field: inside a parameter, `path` ends with its field
// name and `types` lists every module around it.
impl<B: Backend> ModuleVisitor<B> for Picker<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push(name.to_string());
        // "Struct:BatchNorm", "Enum:Norm", "Vec", ...: the type name after the colon.
        let ty = container_type.rsplit(':').next().unwrap_or(container_type);
        self.types.push(ty.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
        self.types.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.picks() {
            self.picked.insert(param.id);
        }
    }
}
