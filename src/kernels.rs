//! CubeCL's kernel caches and its log of compilations and autotune runs, for the GPU
//! backends (CUDA, Vulkan).
//!
//! A fused GPU backend compiles a kernel for each new fusion of operations and shapes, and
//! with `autotune` it first compiles and times the candidates for each new matmul or
//! reduction shape. CubeCL keeps autotune results on disk by default, but compiled kernels
//! only when told where; [`KernelCache::install`] points both at one folder, so that a second
//! process (the GPU check's next stage, a user's next run) loads them instead, and logs each
//! compilation and autotune run so that [`KernelCounts::read`] can count them.

use std::path::{Path, PathBuf};

#[cfg(any(feature = "cuda", feature = "vulkan"))]
use cubecl_runtime::config::autotune::AutotuneLogLevel;
#[cfg(any(feature = "cuda", feature = "vulkan"))]
use cubecl_runtime::config::cache::CacheConfig;
#[cfg(any(feature = "cuda", feature = "vulkan"))]
use cubecl_runtime::config::compilation::CompilationLogLevel;
#[cfg(any(feature = "cuda", feature = "vulkan"))]
use cubecl_runtime::config::profiling::ProfilingLogLevel;
#[cfg(any(feature = "cuda", feature = "vulkan"))]
use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};

/// CubeCL's caches in one folder, and a log of what was compiled and tuned.
#[derive(Clone, Debug)]
pub struct KernelCache {
    /// Compiled kernels (`<dir>/<backend>/`) and autotune results (`<dir>/autotune/`).
    pub dir: PathBuf,
    /// One line per kernel compiled and per autotune run (the winner and the key), and with
    /// [`KernelCache::install_counting_launches`] one per kernel launched.
    pub log: PathBuf,
}

impl KernelCache {
    /// Points CubeCL at this cache and log, on top of what a `cubecl.toml` or the
    /// `CUBECL_*` variables say. Call it before the first tensor operation: CubeCL reads its
    /// configuration once per process, and this panics if it already has.
    #[cfg(any(feature = "cuda", feature = "vulkan"))]
    pub fn install(&self) {
        CubeClRuntimeConfig::set(self.config());
    }

    /// [`KernelCache::install`], and one log line per kernel launched (CubeCL's profiling
    /// log at its `minimal` level: the kernel's name, no timing, no added sync).
    #[cfg(any(feature = "cuda", feature = "vulkan"))]
    pub fn install_counting_launches(&self) {
        let mut config = self.config();
        config.profiling.logger.level = ProfilingLogLevel::Minimal;
        config.profiling.logger.file = Some(self.log.clone());
        CubeClRuntimeConfig::set(config);
    }

    #[cfg(any(feature = "cuda", feature = "vulkan"))]
    fn config(&self) -> CubeClRuntimeConfig {
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.compilation.cache = Some(CacheConfig::File(self.dir.clone()));
        config.autotune.cache = CacheConfig::File(self.dir.clone());
        // One line per kernel (its name), not its source; one per autotune run.
        if matches!(
            config.compilation.logger.level,
            CompilationLogLevel::Disabled
        ) {
            config.compilation.logger.level = CompilationLogLevel::Basic;
        }
        if matches!(config.autotune.logger.level, AutotuneLogLevel::Disabled) {
            config.autotune.logger.level = AutotuneLogLevel::Minimal;
        }
        config.compilation.logger.file = Some(self.log.clone());
        config.autotune.logger.file = Some(self.log.clone());
        config
    }
}

/// What a [`KernelCache`] log records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounts {
    /// Kernels compiled (not those loaded from the cache).
    pub compiled: usize,
    /// Autotune runs, one per new key (operation and shape class); each compiles and times
    /// its candidates.
    pub tuned: usize,
    /// Kernels launched, counted after [`KernelCache::install_counting_launches`].
    pub launched: usize,
}

impl KernelCounts {
    /// The counts in `log`; zero when it does not exist (nothing was compiled or tuned).
    pub fn read(log: &Path) -> Self {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let count = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
        KernelCounts {
            compiled: count("[Compiling kernel]") + count("[START_KERNEL_COMPILATION]"),
            tuned: count("Fastest result"),
            launched: count("Executing "),
        }
    }
}

impl std::ops::Sub for KernelCounts {
    type Output = KernelCounts;

    fn sub(self, earlier: KernelCounts) -> KernelCounts {
        KernelCounts {
            compiled: self.compiled - earlier.compiled,
            tuned: self.tuned - earlier.tuned,
            launched: self.launched - earlier.launched,
        }
    }
}
