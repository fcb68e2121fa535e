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

/// Emits a suite's cases (`name => body`; `B` is the backend, `setup` runs first) as `#[test]`
/// functions (`tests`), or as a `cases()` list of named functions (`list`) for a runner
/// without libtest (the GPU bundle).
#[macro_export]
macro_rules! emit_cases {
    (tests, $name:ident, $backend:ty, $setup:expr, [$($case:ident => $body:expr,)*]) => {
        mod $name {
            use $crate::suite::*;
            type B = $backend;
            $(
                #[test]
                fn $case() {
                    $setup;
                    $body;
                }
            )*
        }
    };
    (list, $name:ident, $backend:ty, $setup:expr, [$($case:ident => $body:expr,)*]) => {
        pub mod $name {
            use $crate::suite::*;
            type B = $backend;
            /// Every case of the suite, by name.
            pub fn cases() -> Vec<(&'static str, fn())> {
                vec![$((stringify!($case), || {
                    $setup;
                    $body;
                })),*]
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
        }, [
                parity_sam_sgd => parity::run::<B>("sam_sgd"),
                parity_sam_sgd_momentum => parity::run::<B>("sam_sgd_momentum"),
                parity_asam_sgd => parity::run::<B>("asam_sgd"),
                parity_asam_eta_sgd => parity::run::<B>("asam_eta_sgd"),
                parity_sam_adam => parity::run::<B>("sam_adam"),
                parity_sam_clip => clipping::run::<B>("sam_clip"),
                parity_sam_clip_scaled => clipping::run::<B>("sam_clip_scaled"),
                parity_sam_clip_accumulated => clipping::run::<B>("sam_clip_accumulated"),
                parity_loss_scaled_clip => clipping::run::<B>("scaled_clip"),
                parity_gsam_sgd => family::run::<B>("gsam_sgd"),
                parity_gsam_schedule_sgd_momentum => family::run::<B>("gsam_schedule_sgd_momentum"),
                parity_looksam_sgd => family::run::<B>("looksam_sgd"),
                parity_looksam_sgd_momentum => family::run::<B>("looksam_sgd_momentum"),
                parity_fsam_sgd => family::run::<B>("fsam_sgd"),
                parity_fsam_sgd_momentum => family::run::<B>("fsam_sgd_momentum"),
                parity_sam_picked_sgd => family::run::<B>("sam_picked_sgd"),
                lifecycle_every_variant_hands_back_what_it_was_given => lifecycle::every_variant_hands_back_what_it_was_given::<B>(),
                lifecycle_step_with_hands_back_the_phases_w => lifecycle::step_with_hands_back_the_phases_w::<B>(),
                parity_momentum_sam_sgd => momentum_sam::run::<B>("sgd"),
                parity_momentum_sam_sgd_large_rho => momentum_sam::run::<B>("sgd_large_rho"),
                parity_momentum_sam_sgd_weight_decay => momentum_sam::run::<B>("sgd_weight_decay"),
                parity_momentum_sam_mu_other_than_sgds => momentum_sam::run::<B>("sgd_mu_half"),
                parity_momentum_sam_over_plain_sgd => momentum_sam::run::<B>("sgd_plain_base"),
                parity_momentum_sam_adamw => momentum_sam::run::<B>("adamw"),
                parity_momentum_sam_adamw_weight_decay => momentum_sam::run::<B>("adamw_weight_decay"),
                momentum_sam_overflow_changes_nothing => momentum_sam::overflow_changes_nothing::<B>(),
                momentum_sam_record_resumes_exactly => momentum_sam::record_resumes_exactly::<B>(),
                family_records_resume_every_variant_exactly => family::records_resume_every_variant_exactly::<B>(),
                family_variants_reduce_to_sam => family::variants_reduce_to_sam::<B>(),
                family_perturb_only_picks_by_type_and_path => family::perturb_only_picks_by_type_and_path::<B>(),
                rho_zero_equals_base_optimizer => semantics::rho_zero_equals_base_optimizer::<B>(),
                schedule_limits_are_sam_and_the_base_optimizer => schedule::limits_are_sam_and_the_base_optimizer::<B>(None),
                schedule_limits_are_sam_and_the_base_optimizer_loss_scaled => schedule::limits_are_sam_and_the_base_optimizer::<B>(Some(burn_sam::LossScalerConfig::new().with_init_scale(1024.0))),
                schedule_base_steps_leave_the_variant_as_it_was => schedule::base_steps_leave_the_variant_as_it_was::<B>(),
                schedule_the_split_api_learns_base_steps => schedule::the_split_api_learns_base_steps::<B>(),
                schedule_loss_scaling_updates_once_per_step => schedule::loss_scaling_updates_once_per_step::<B>(),
                schedule_records_resume_mid_schedule => schedule::records_resume_mid_schedule::<B>(),
                parity_adaptive_sgd => adaptive::run::<B>("adaptive_sgd"),
                parity_adaptive_sgd_momentum => adaptive::run::<B>("adaptive_sgd_momentum"),
                adaptive_limits_and_the_ascent_that_steps => adaptive::limits_and_the_ascent_that_steps::<B>(),
                adaptive_records_resume_the_statistics => adaptive::records_resume_the_statistics::<B>(),
                adaptive_refusals_hand_back_w_and_change_nothing => adaptive::refusals_hand_back_w_and_change_nothing::<B>(),
                api_forms_agree => semantics::api_forms_agree::<B>(),
                frozen_and_unused_parameters_untouched => semantics::frozen_and_unused_parameters_untouched::<B>(),
                record_round_trip_resumes_exactly => semantics::record_round_trip_resumes_exactly::<B>(),
                batchnorm_statistics_see_the_batch_once => batchnorm::statistics_see_the_batch_once::<B>(),
                batchnorm_sam_on_perturbs_only_the_normalisation_layers => batchnorm::sam_on_perturbs_only_the_normalisation_layers::<B>(),
                records_refused_pairings_change_nothing => records::refused_pairings_change_nothing::<B>(),
                records_allowed_pairings_load => records::allowed_pairings_load::<B>(),
                records_before_labels => records::records_before_labels::<B>(),
                resume_a_half_precision_checkpoint_is_noticed => resume::a_half_precision_checkpoint_is_noticed::<B>(),
                misuse_is_reported => misuse::errors_name_the_mistake::<B>(),
                misuse_through_optimizer_step_panics_clearly => misuse::optimizer_step_panics_clearly::<B>(),
                misuse_unscaled_loss_is_refused => misuse::unscaled_loss_is_refused::<B>(),
                misuse_unlinked_optimizer_step_is_refused => misuse::unlinked_optimizer_step_is_refused::<B>(),
                misuse_a_step_linked_to_another_optimizer_is_refused => misuse::a_step_linked_to_another_optimizer_is_refused::<B>(),
                misuse_hard_stop_and_step_with_hand_the_module_back => misuse::hard_stop_and_step_with_hand_the_module_back::<B>(),
                non_finite_ascent_falls_back_to_base_step => faults::non_finite_ascent_falls_back_to_base_step::<B>(),
                non_finite_descent_changes_nothing => faults::non_finite_descent_changes_nothing::<B>(),
                local_ascent_passes_its_fault_on => faults::local_ascent_passes_its_fault_on::<B>(),
                accumulation_micro_batch_gradients_equal_the_union => accumulation::micro_batch_gradients_equal_the_union::<B>(),
                accumulation_plain_trajectory_equals_the_large_batch => accumulation::plain_trajectory_equals_the_large_batch::<B>(),
                accumulation_exact_sam_trajectory_equals_the_large_batch => accumulation::exact_sam_trajectory_equals_the_large_batch::<B>(),
                accumulation_partial_window_equals_its_union => accumulation::partial_window_equals_its_union::<B>(),
                accumulation_per_micro_batch_windows_of_one_equal_sam => accumulation::per_micro_batch_windows_of_one_equal_sam::<B>(),
                accumulation_per_micro_batch_matches_its_definition => accumulation::per_micro_batch_matches_its_definition::<B>(),
                accumulation_bad_windows_are_refused => accumulation::bad_windows_are_refused::<B>(),
                accumulation_failure_between_passes_restores_the_weights => accumulation::failure_between_passes_restores_the_weights::<B>(),
        ]);
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
        $crate::emit_cases!(
            $mode,
            $name,
            $backend,
            util::use_float_dtype::<B>(burn::tensor::FloatDType::F16),
            [
                ascent_moves_by_rho_and_descent_by_the_true_gradient => mixed_precision::ascent_moves_by_rho_and_descent_by_the_true_gradient::<B>(),
                faults_never_reach_the_weights => mixed_precision::faults_never_reach_the_weights::<B>(burn_sam::SamVariant::Sam, 1200),
                faults_never_reach_the_weights_gsam => mixed_precision::faults_never_reach_the_weights::<B>(burn_sam::SamVariant::gsam(), 300),
                faults_never_reach_the_weights_looksam => mixed_precision::faults_never_reach_the_weights::<B>(burn_sam::SamVariant::LookSam { k: 3, alpha: 0.7 }, 300),
                faults_never_reach_the_weights_friendly_sam => mixed_precision::faults_never_reach_the_weights::<B>(burn_sam::SamVariant::friendly_sam(), 300),
                faults_never_reach_the_weights_momentum_sam => mixed_precision::faults_never_reach_the_weights::<B>(burn_sam::SamVariant::momentum_sam(), 300),
                underflowing_gradients_train_with_scaling => mixed_precision::underflowing_gradients_train_with_scaling::<B>(),
                master_weights_keep_small_updates => mixed_precision::master_weights_keep_small_updates::<B>(),
                record_round_trip_resumes_exactly => mixed_precision::record_round_trip_resumes_exactly::<B>(),
                default_scale_backs_off_until_it_fits => mixed_precision::default_scale_backs_off_until_it_fits::<B>(),
                accumulation_overflow_in_one_micro_batch_skips_the_window => accumulation::overflow_in_one_micro_batch_skips_the_window::<B>(),
                schedule_limits_are_sam_and_the_base_optimizer => schedule::limits_are_sam_and_the_base_optimizer::<B>(None),
                schedule_limits_are_sam_and_the_base_optimizer_loss_scaled => schedule::limits_are_sam_and_the_base_optimizer::<B>(Some(burn_sam::LossScalerConfig::new().with_init_scale(1024.0))),
                schedule_loss_scaling_updates_once_per_step => schedule::loss_scaling_updates_once_per_step::<B>(),
                schedule_records_resume_mid_schedule => schedule::records_resume_mid_schedule::<B>(),
                adaptive_limits_and_the_ascent_that_steps => adaptive::limits_and_the_ascent_that_steps::<B>(),
                adaptive_records_resume_the_statistics => adaptive::records_resume_the_statistics::<B>(),
                adaptive_refusals_hand_back_w_and_change_nothing => adaptive::refusals_hand_back_w_and_change_nothing::<B>(),
                resume_f16_checkpoints_continue_bitwise_or_are_refused => resume::f16_checkpoints_continue_bitwise::<B>(),
            ]
        );
    };
    ($name:ident, $backend:ty) => {
        $crate::f16_suite!(tests, $name, $backend);
    };
}

/// Instantiates the tests of f16 parameters cast on an f32-default device.
#[macro_export]
macro_rules! f16_params_suite {
    ($mode:ident, $name:ident, $backend:ty) => {
        $crate::emit_cases!(
            $mode,
            $name,
            $backend,
            util::use_float_dtype::<B>(burn::tensor::FloatDType::F32),
            [
                adam_resumes_exactly_with_cast_params => mixed_precision::adam_resumes_exactly_with_cast_params::<B>(),
                resume_f16_checkpoints_continue_bitwise => resume::f16_checkpoints_continue_bitwise::<B>(),
                resume_accumulation_resumes_f16_bitwise => resume::accumulation_resumes_f16_bitwise::<B>(),
                resume_f16_batchnorm_statistics_come_back_f16 => batchnorm::f16_resume_restores_the_running_statistics::<B>(),
            ]
        );
    };
    ($name:ident, $backend:ty) => {
        $crate::f16_params_suite!(tests, $name, $backend);
    };
}
