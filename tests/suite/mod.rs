//! Tests written once, generic over the autodiff backend. Each backend's test file
//! instantiates them with [`backend_suite!`]; float types that a backend selects at run time
//! (Flex) get a test binary each, since the default dtype is fixed per process.

// Each test binary instantiates the part of the suite its backend and float type support.
#![allow(dead_code)]

pub mod accumulation;
pub mod batchnorm;
pub mod faults;
pub mod misuse;
pub mod mixed_precision;
pub mod parity;
pub mod semantics;
pub mod util;

/// Instantiates every test of the suite for one autodiff backend.
#[macro_export]
macro_rules! backend_suite {
    ($name:ident, $backend:ty, $dtype:expr) => {
        mod $name {
            use $crate::suite::*;
            type B = $backend;

            fn setup() {
                util::use_float_dtype::<B>($dtype);
            }

            #[test]
            fn parity_sam_sgd() {
                setup();
                parity::run::<B>("sam_sgd");
            }
            #[test]
            fn parity_sam_sgd_momentum() {
                setup();
                parity::run::<B>("sam_sgd_momentum");
            }
            #[test]
            fn parity_asam_sgd() {
                setup();
                parity::run::<B>("asam_sgd");
            }
            #[test]
            fn parity_asam_eta_sgd() {
                setup();
                parity::run::<B>("asam_eta_sgd");
            }
            #[test]
            fn parity_sam_adam() {
                setup();
                parity::run::<B>("sam_adam");
            }
            #[test]
            fn rho_zero_equals_base_optimizer() {
                setup();
                semantics::rho_zero_equals_base_optimizer::<B>();
            }
            #[test]
            fn api_forms_agree() {
                setup();
                semantics::api_forms_agree::<B>();
            }
            #[test]
            fn frozen_and_unused_parameters_untouched() {
                setup();
                semantics::frozen_and_unused_parameters_untouched::<B>();
            }
            #[test]
            fn record_round_trip_resumes_exactly() {
                setup();
                semantics::record_round_trip_resumes_exactly::<B>();
            }
            #[test]
            fn batchnorm_statistics_see_the_batch_once() {
                setup();
                batchnorm::statistics_see_the_batch_once::<B>();
            }
            #[test]
            fn misuse_is_reported() {
                setup();
                misuse::errors_name_the_mistake::<B>();
            }
            #[test]
            fn misuse_through_optimizer_step_panics_clearly() {
                setup();
                misuse::optimizer_step_panics_clearly::<B>();
            }
            #[test]
            fn non_finite_ascent_falls_back_to_base_step() {
                setup();
                faults::non_finite_ascent_falls_back_to_base_step::<B>();
            }
            #[test]
            fn non_finite_descent_changes_nothing() {
                setup();
                faults::non_finite_descent_changes_nothing::<B>();
            }
            #[test]
            fn accumulation_micro_batch_gradients_equal_the_union() {
                setup();
                accumulation::micro_batch_gradients_equal_the_union::<B>();
            }
            #[test]
            fn accumulation_plain_trajectory_equals_the_large_batch() {
                setup();
                accumulation::plain_trajectory_equals_the_large_batch::<B>();
            }
            #[test]
            fn accumulation_exact_sam_trajectory_equals_the_large_batch() {
                setup();
                accumulation::exact_sam_trajectory_equals_the_large_batch::<B>();
            }
            #[test]
            fn accumulation_partial_window_equals_its_union() {
                setup();
                accumulation::partial_window_equals_its_union::<B>();
            }
            #[test]
            fn accumulation_per_micro_batch_windows_of_one_equal_sam() {
                setup();
                accumulation::per_micro_batch_windows_of_one_equal_sam::<B>();
            }
            #[test]
            fn accumulation_per_micro_batch_matches_its_definition() {
                setup();
                accumulation::per_micro_batch_matches_its_definition::<B>();
            }
            #[test]
            fn accumulation_bad_windows_are_refused() {
                setup();
                accumulation::bad_windows_are_refused::<B>();
            }
        }
    };
}

/// Instantiates the mixed-precision tests for one autodiff backend, in f16.
#[macro_export]
macro_rules! f16_suite {
    ($name:ident, $backend:ty) => {
        mod $name {
            use $crate::suite::*;
            type B = $backend;

            fn setup() {
                util::use_float_dtype::<B>(burn::tensor::FloatDType::F16);
            }

            #[test]
            fn ascent_moves_by_rho_and_descent_by_the_true_gradient() {
                setup();
                mixed_precision::ascent_moves_by_rho_and_descent_by_the_true_gradient::<B>();
            }
            #[test]
            fn faults_never_reach_the_weights() {
                setup();
                mixed_precision::faults_never_reach_the_weights::<B>();
            }
            #[test]
            fn underflowing_gradients_train_with_scaling() {
                setup();
                mixed_precision::underflowing_gradients_train_with_scaling::<B>();
            }
            #[test]
            fn master_weights_keep_small_updates() {
                setup();
                mixed_precision::master_weights_keep_small_updates::<B>();
            }
            #[test]
            fn record_round_trip_resumes_exactly() {
                setup();
                mixed_precision::record_round_trip_resumes_exactly::<B>();
            }
            #[test]
            fn default_scale_backs_off_until_it_fits() {
                setup();
                mixed_precision::default_scale_backs_off_until_it_fits::<B>();
            }
            #[test]
            fn accumulation_overflow_in_one_micro_batch_skips_the_window() {
                setup();
                accumulation::overflow_in_one_micro_batch_skips_the_window::<B>();
            }
        }
    };
}

/// Instantiates the tests of f16 parameters cast on an f32-default device.
#[macro_export]
macro_rules! f16_params_suite {
    ($name:ident, $backend:ty) => {
        mod $name {
            use $crate::suite::*;
            type B = $backend;

            #[test]
            fn adam_resumes_exactly_with_cast_params() {
                util::use_float_dtype::<B>(burn::tensor::FloatDType::F32);
                mixed_precision::adam_resumes_exactly_with_cast_params::<B>();
            }
        }
    };
}
