//! Tests written once, generic over the autodiff backend. Each backend's test file
//! instantiates them with [`backend_suite!`]; float types that a backend selects at run time
//! (Flex) get a test binary each, since the default dtype is fixed per process. The GPU bundle
//! (`examples/gpu-check`) instantiates the same cases as lists (`list` mode) and runs them
//! without libtest.

// Each test binary instantiates the part of the suite its backend and float type support.
#![allow(dead_code)]

pub mod accumulation;
pub mod adaptive;
pub mod batchnorm;
pub mod clipping;
pub mod family;
pub mod faults;
pub mod fixture;
pub mod lifecycle;
pub mod misuse;
pub mod mixed_precision;
pub mod momentum_sam;
pub mod parity;
pub mod records;
pub mod resume;
pub mod schedule;
pub mod semantics;
pub mod util;

/// Emits a suite's cases as `#[test]` functions (`tests`), or as a `cases()` list of named
/// functions (`list`) for a runner without libtest (the GPU bundle). `B` is the backend and
/// `setup` runs first. Cases come grouped by the suite module that holds them, each named
/// once: a fixture a module's `run` replays (`fixtures`), a function of the module (`tests`),
/// or a name for a function called with arguments (`calls`). The test of fixture `f` of module
/// `m` is `m::f`; of function `t`, `m::t`.
#[macro_export]
macro_rules! emit_cases {
    (tests, $name:ident, $backend:ty, $setup:expr, {$($module:ident: $(fixtures [$($fixture:ident),* $(,)?])? $(tests [$($test:ident),* $(,)?])? $(calls [$($call:ident => $function:ident($($arg:expr),*)),* $(,)?])?;)*}) => {
        mod $name {
            type B = $backend;
            $(
                mod $module {
                    use $crate::suite::*;
                    type B = super::B;
                    $($(
                        #[test]
                        fn $fixture() {
                            $setup;
                            $module::run::<B>(stringify!($fixture));
                        }
                    )*)?
                    $($(
                        #[test]
                        fn $test() {
                            $setup;
                            $module::$test::<B>();
                        }
                    )*)?
                    $($(
                        #[test]
                        fn $call() {
                            $setup;
                            $module::$function::<B>($($arg),*);
                        }
                    )*)?
                }
            )*
        }
    };
    (list, $name:ident, $backend:ty, $setup:expr, {$($module:ident: $(fixtures [$($fixture:ident),* $(,)?])? $(tests [$($test:ident),* $(,)?])? $(calls [$($call:ident => $function:ident($($arg:expr),*)),* $(,)?])?;)*}) => {
        pub mod $name {
            use $crate::suite::*;
            type B = $backend;
            /// Every case of the suite, by name (`module::case`).
            pub fn cases() -> Vec<(&'static str, fn())> {
                let mut cases: Vec<(&'static str, fn())> = Vec::new();
                $(
                    $($(cases.push((concat!(stringify!($module), "::", stringify!($fixture)), || {
                        $setup;
                        $module::run::<B>(stringify!($fixture));
                    }));)*)?
                    $($(cases.push((concat!(stringify!($module), "::", stringify!($test)), || {
                        $setup;
                        $module::$test::<B>();
                    }));)*)?
                    $($(cases.push((concat!(stringify!($module), "::", stringify!($call)), || {
                        $setup;
                        $module::$function::<B>($($arg),*);
                    }));)*)?
                )*
                cases
            }
        }
    };
}

/// Instantiates every test of the suite for one autodiff backend and float type.
#[macro_export]
macro_rules! backend_suite {
    ($mode:ident, $name:ident, $backend:ty, $dtype:expr, $matmul:expr) => {
        $crate::emit_cases!($mode, $name, $backend, {
            util::use_float_dtype::<B>($dtype);
            util::use_matmul_inputs($matmul);
        }, {
            parity: fixtures [sam_sgd, sam_sgd_momentum, asam_sgd, asam_eta_sgd, sam_adam];
            clipping: fixtures [sam_clip, sam_clip_scaled, sam_clip_accumulated, scaled_clip];
            family: fixtures [
                gsam_sgd, gsam_schedule_sgd_momentum, looksam_sgd, looksam_sgd_momentum, fsam_sgd,
                fsam_sgd_momentum, sam_picked_sgd,
            ] tests [
                records_resume_every_variant_exactly, variants_reduce_to_sam,
                perturb_only_picks_by_type_and_path,
            ];
            lifecycle: tests [every_variant_hands_back_what_it_was_given, step_with_hands_back_the_phases_w];
            momentum_sam: fixtures [
                sgd, sgd_large_rho, sgd_weight_decay, sgd_mu_half, sgd_plain_base, adamw,
                adamw_weight_decay,
            ] tests [overflow_changes_nothing, record_resumes_exactly];
            semantics: tests [
                rho_zero_equals_base_optimizer, api_forms_agree, reports_carry_both_losses,
                frozen_and_unused_parameters_untouched, record_round_trip_resumes_exactly,
            ];
            schedule: tests [
                base_steps_leave_the_variant_as_it_was, the_split_api_learns_base_steps,
                loss_scaling_updates_once_per_step, records_resume_mid_schedule,
            ] calls [
                limits_are_sam_and_the_base_optimizer => limits_are_sam_and_the_base_optimizer(None),
                limits_are_sam_and_the_base_optimizer_loss_scaled => limits_are_sam_and_the_base_optimizer(Some(burn_sam::LossScalerConfig::new().with_init_scale(1024.0))),
            ];
            adaptive: fixtures [adaptive_sgd, adaptive_sgd_momentum] tests [
                limits_and_the_ascent_that_steps, records_resume_the_statistics,
                refusals_hand_back_w_and_change_nothing,
            ];
            batchnorm: tests [statistics_see_the_batch_once, sam_on_perturbs_only_the_normalisation_layers];
            records: tests [refused_pairings_change_nothing, allowed_pairings_load, records_before_labels];
            resume: tests [a_half_precision_checkpoint_is_noticed];
            misuse: tests [
                errors_name_the_mistake, optimizer_step_panics_clearly, unscaled_loss_is_refused,
                unlinked_optimizer_step_is_refused, a_step_linked_to_another_optimizer_is_refused,
                hard_stop_and_step_with_hand_the_module_back,
            ];
            faults: tests [
                non_finite_ascent_falls_back_to_base_step, non_finite_descent_changes_nothing,
                local_ascent_passes_its_fault_on,
            ];
            accumulation: tests [
                micro_batch_gradients_equal_the_union, plain_trajectory_equals_the_large_batch,
                exact_sam_trajectory_equals_the_large_batch, partial_window_equals_its_union,
                per_micro_batch_windows_of_one_equal_sam, per_micro_batch_matches_its_definition,
                bad_windows_are_refused, failure_between_passes_restores_the_weights,
            ];
        });
    };
    ($mode:ident, $name:ident, $backend:ty, $dtype:expr) => {
        $crate::backend_suite!($mode, $name, $backend, $dtype, util::MatmulInputs::F32);
    };
    ($name:ident, $backend:ty, $dtype:expr) => {
        $crate::backend_suite!(tests, $name, $backend, $dtype);
    };
}

/// Instantiates the mixed-precision tests for one autodiff backend, in f16.
#[macro_export]
macro_rules! f16_suite {
    ($mode:ident, $name:ident, $backend:ty) => {
        $crate::emit_cases!($mode, $name, $backend, util::use_float_dtype::<B>(burn::tensor::FloatDType::F16), {
            mixed_precision: tests [
                ascent_moves_by_rho_and_descent_by_the_true_gradient,
                underflowing_gradients_train_with_scaling, master_weights_keep_small_updates,
                record_round_trip_resumes_exactly, default_scale_backs_off_until_it_fits,
            ] calls [
                faults_never_reach_the_weights => faults_never_reach_the_weights(burn_sam::SamVariant::Sam, 1200),
                faults_never_reach_the_weights_gsam => faults_never_reach_the_weights(burn_sam::SamVariant::gsam(), 300),
                faults_never_reach_the_weights_looksam => faults_never_reach_the_weights(burn_sam::SamVariant::LookSam { k: 3, alpha: 0.7 }, 300),
                faults_never_reach_the_weights_friendly_sam => faults_never_reach_the_weights(burn_sam::SamVariant::friendly_sam(), 300),
                faults_never_reach_the_weights_momentum_sam => faults_never_reach_the_weights(burn_sam::SamVariant::momentum_sam(), 300),
            ];
            accumulation: tests [overflow_in_one_micro_batch_skips_the_window];
            schedule: tests [loss_scaling_updates_once_per_step, records_resume_mid_schedule] calls [
                limits_are_sam_and_the_base_optimizer => limits_are_sam_and_the_base_optimizer(None),
                limits_are_sam_and_the_base_optimizer_loss_scaled => limits_are_sam_and_the_base_optimizer(Some(burn_sam::LossScalerConfig::new().with_init_scale(1024.0))),
            ];
            adaptive: tests [
                limits_and_the_ascent_that_steps, records_resume_the_statistics,
                refusals_hand_back_w_and_change_nothing,
            ];
            // On an f16 default, stateful bases are refused and plain SGD continues bitwise.
            resume: tests [f16_checkpoints_continue_bitwise];
        });
    };
    ($name:ident, $backend:ty) => {
        $crate::f16_suite!(tests, $name, $backend);
    };
}

/// Instantiates the tests of f16 parameters cast on an f32-default device.
#[macro_export]
macro_rules! f16_params_suite {
    ($mode:ident, $name:ident, $backend:ty) => {
        $crate::emit_cases!($mode, $name, $backend, util::use_float_dtype::<B>(burn::tensor::FloatDType::F32), {
            mixed_precision: tests [adam_resumes_exactly_with_cast_params];
            resume: tests [f16_checkpoints_continue_bitwise, accumulation_resumes_f16_bitwise];
            batchnorm: tests [f16_resume_restores_the_running_statistics];
        });
    };
    ($name:ident, $backend:ty) => {
        $crate::f16_params_suite!(tests, $name, $backend);
    };
}
