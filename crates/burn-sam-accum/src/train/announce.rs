//! The line `SamTraining` starts with: what it will run, so that a log says SAM is on.

use burn_sam::variant::PassRule;
use burn_sam::SamConfig;

/// What a `SamTraining` run does per optimizer step, in one line: the optimizer (SAM's variant,
/// radius and passes, or none), loss scaling, the accumulation window, replicas and ranks.
pub(super) fn announcement(
    sam: Option<&SamConfig>,
    loss_scale: Option<f32>,
    window: usize,
    replicas: usize,
    ranks: usize,
) -> String {
    let optimizer = match sam {
        Some(config) => sam_settings(config),
        None => "no SAM (the optimizer is not `Sam`), 1 pass per step".to_string(),
    };
    let scaling = match loss_scale {
        Some(scale) => format!("loss scaling on (scale {scale})"),
        None => "no loss scaling".to_string(),
    };
    let batches = match window {
        1 => "1 batch per step".to_string(),
        window => format!("{window} batches per step (accumulated)"),
    };
    let replicas = match (replicas, ranks) {
        (1, 1) => "1 device".to_string(),
        (replicas, 1) => format!("{replicas} replicas"),
        (1, ranks) => format!("1 replica on each of {ranks} ranks"),
        (replicas, ranks) => format!("{replicas} replicas on each of {ranks} ranks"),
    };
    format!("burn-sam: SamTraining: {optimizer}; {scaling}; {batches}; {replicas}")
}

/// The variant, its radius and the passes a step takes.
fn sam_settings(config: &SamConfig) -> String {
    let variant = &config.variant;
    let mut radius = format!("rho {}", config.rho);
    if let Some(schedule) = &config.rho_schedule {
        radius += &format!(
            " at lr {} (down to {} at lr {})",
            schedule.lr_max, schedule.rho_min, schedule.lr_min
        );
    }
    if config.adaptive {
        radius += &format!(", adaptive (ASAM, eta {})", config.eta);
    }
    if let Some(names) = &config.perturb_only {
        radius += &format!(", perturbing only {names:?}");
    }
    let passes = match variant.properties().passes {
        PassRule::TwoEvery { k } => format!("2 passes every {k} steps, 1 on the others"),
        PassRule::LookAhead => {
            "1 pass per step, at the look-ahead w~ (the Learner's model is w between steps)"
                .to_string()
        }
        PassRule::Two => "2 passes per step".to_string(),
    };
    let passes = match &config.schedule {
        Some(schedule) => format!("{passes} on SAM steps, scheduled: {}", schedule.describe()),
        None => passes,
    };
    let clipping = match config.max_grad_norm {
        Some(max) => format!(", descent gradient clipped to norm {max}"),
        None => String::new(),
    };
    format!(
        "{} ({variant:?}), {radius}, {passes}{clipping}",
        variant.name()
    )
}

#[cfg(test)]
mod tests {
    use burn_sam::{SamSchedule, SamVariant};

    use super::*;

    #[test]
    fn the_line_names_what_runs() {
        let sam = SamConfig::new().with_rho(0.05);
        assert_eq!(
            announcement(Some(&sam), None, 1, 1, 1),
            "burn-sam: SamTraining: SAM (Sam), rho 0.05, 2 passes per step; no loss scaling; \
             1 batch per step; 1 device"
        );
        let msam = SamConfig::new()
            .with_rho(3.0)
            .with_variant(SamVariant::MomentumSam { mu: 0.9 });
        let line = announcement(Some(&msam), Some(1024.0), 4, 2, 3);
        assert_eq!(
            line,
            "burn-sam: SamTraining: Momentum-SAM (MomentumSam { mu: 0.9 }), rho 3, 1 pass per \
             step, at the look-ahead w~ (the Learner's model is w between steps); loss scaling on \
             (scale 1024); 4 batches per step (accumulated); 2 replicas on each of 3 ranks"
        );
        let clipped = SamConfig::new().with_max_grad_norm(Some(1.0));
        assert!(announcement(Some(&clipped), None, 1, 1, 1)
            .contains("2 passes per step, descent gradient clipped to norm 1; no loss scaling"));
        let look = SamConfig::new().with_variant(SamVariant::look_sam());
        assert!(announcement(Some(&look), None, 1, 2, 1)
            .contains("2 passes every 10 steps, 1 on the others; no loss scaling; 1 batch per step; 2 replicas"));
        let late = SamConfig::new().with_schedule(Some(SamSchedule::From { step: 900 }));
        assert!(announcement(Some(&late), None, 1, 1, 1).contains(
            "2 passes per step on SAM steps, scheduled: one-pass base steps before step 900, \
             SAM from it on; no loss scaling"
        ));
        assert!(announcement(None, None, 1, 1, 4).ends_with("1 replica on each of 4 ranks"));
        assert!(announcement(None, Some(8.0), 1, 1, 1)
            .starts_with("burn-sam: SamTraining: no SAM (the optimizer is not `Sam`), 1 pass per step; loss scaling on (scale 8)"));
    }
}
