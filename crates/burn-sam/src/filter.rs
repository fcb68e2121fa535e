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

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::nn::{Linear, LinearConfig};

    use super::*;

    #[test]
    fn names_pick_types_and_dotted_paths_at_boundaries() {
        let model: Linear<Flex> = LinearConfig::new(2, 1).init(&Default::default());
        let names =
            |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
        let bias = model.bias.as_ref().unwrap().id;
        let weight = model.weight.id;
        assert_eq!(
            picked(&model, &names(&["Linear"])),
            HashSet::from([weight, bias])
        );
        assert_eq!(picked(&model, &names(&["bias"])), HashSet::from([bias]));
        assert!(picked(&model, &names(&["bia"])).is_empty());
        assert_eq!(perturbed_params(&model, None), Ok(None));
        assert_eq!(
            perturbed_params(&model, Some(&names(&["LayerNorm"]))),
            Err(SamError::NothingPicked {
                names: names(&["LayerNorm"])
            })
        );
    }
}
