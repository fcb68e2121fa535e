//! The order per-parameter operations are queued in. A fused backend (Burn's `fusion`: CUDA,
//! Vulkan) runs a run of element-wise operations over equally shaped tensors as one kernel;
//! queued in the module's order (weight, bias, weight: shapes alternating), each parameter's
//! became a kernel of its own.

use std::collections::HashMap;

/// `items` grouped by shape, each group where its shape first occurs (so the order given when
/// no shape repeats), and in the order given within a group.
pub(crate) fn by_shape<T>(items: Vec<(Vec<usize>, T)>) -> impl Iterator<Item = T> {
    let mut first = HashMap::new();
    let mut items: Vec<_> = (items.into_iter().enumerate())
        .map(|(index, (shape, item))| (*first.entry(shape).or_insert(index), item))
        .collect();
    items.sort_by_key(|(group, _)| *group);
    items.into_iter().map(|(_, item)| item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_their_first_place_and_their_order() {
        let items = vec![
            (vec![3, 2], "w1"),
            (vec![2], "b1"),
            (vec![2, 2], "w2"),
            (vec![2], "b2"),
            (vec![2, 2], "w3"),
        ];
        let order: Vec<_> = by_shape(items).collect();
        assert_eq!(order, ["w1", "b1", "b2", "w2", "w3"]);
    }
}
