//! Reachability on a CUDA device ([`Backend::Cuda`], issue 23), in builds with the cargo feature `gpu`.
//!
//! Cobra computes the closure on a GPU by repeated boolean squaring of the adjacency matrix (§5):
//! `log(depth)` squarings of `nodes³ / 64` word operations each. The device here runs what the CPU backends
//! run instead, the level-by-level fill of [`levels`](crate::levels): rows stored in level order, one launch
//! per wide level and one block for a run of narrow ones, one thread per row entry. Its work grows with `edges × row width`, not `nodes³`, and it
//! serves the case the CPU does worst: live sets of millions of transactions over hundreds of chains, whose
//! rows outgrow a CPU's caches. [`squaring_closure`] keeps Cobra's method, for the benchmark to compare.
//!
//! The kernels (`crates/kernels/cuda/closure.cu`) are compiled at run time with NVRTC for the device
//! present, and cudarc loads the driver and NVRTC dynamically: a build with `gpu` starts and answers on a
//! machine without CUDA, where [`device_name`] says why there is no device.
//!
//! Every kernel launch and the loader's probes are `unsafe` in cudarc; each such block says why it holds.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};
use cudarc::nvrtc::CompileOptions;
use rayon::prelude::*;

use crate::clocks::ChainCover;
use crate::levels::levels;
use crate::{Backend, BitsetRows, ChainClocks, Graph, KernelError, Layout, MAX_CLOSURE_BYTES, Reachability};

/// The kernels' source, compiled once per process for the device present.
const SOURCE: &str = include_str!("../cuda/closure.cu");

/// Threads per block: a multiple of the warp, small enough that short levels still spread over the SMs.
const THREADS: u32 = 256;

/// [`Backend::Auto`] fills on the device only from this much work on, counted as `(nodes + edges) × row
/// width` (each row entry takes one value from each successor): below it, copying the graph over and the
/// rows back costs more than the CPU's fill. Measured on an H200 against 16 CPU cores (docs/benchmarks.md,
/// "GPU reachability"): 100k nodes on 200 chains (80M) were faster on the CPU, on 1,000 chains (400M) on
/// the device, and every larger point on the device, by up to 4.5×.
const GPU_FROM_WORK: u64 = 1 << 28;

/// ... and only for rows at least this wide: a narrow row leaves most of a level's threads idle, and a
/// deep graph of narrow levels is filled by one block, so the CPU's caches win there (on 24 chains, at
/// every size measured, up to 2M nodes).
const GPU_FROM_WIDTH: u64 = 128;

/// Large rows come back through a page-locked buffer of this size (see [`Device::download`]).
const STAGING_BYTES: usize = 256 << 20;

/// A level with at most this many row entries is narrow: it joins a run of narrow levels that one block
/// fills in one launch, since a launch costs a few microseconds and a deep history has a level per few
/// transactions.
const NARROW_ENTRIES: u64 = 4096;

/// Threads of the block that fills a run of narrow levels.
const NARROW_THREADS: u32 = 1024;

/// The one block that fills a run of narrow levels.
const NARROW_BLOCK: LaunchConfig =
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (NARROW_THREADS, 1, 1), shared_mem_bytes: 0 };

/// The device's memory that one closure may take, leaving room for the driver and other work.
const DEVICE_SHARE: f64 = 0.8;

/// One CUDA device with the reachability kernels loaded.
struct Device {
    name: String,
    stream: Arc<CudaStream>,
    fill_clocks: CudaFunction,
    fill_bits: CudaFunction,
    fill_clocks_narrow: CudaFunction,
    fill_bits_narrow: CudaFunction,
    square: CudaFunction,
    /// Enough blocks to fill every SM several times over; longer grids stride.
    max_blocks: u32,
    /// One closure at a time: the stream is shared, and two closures would compete for its memory.
    busy: Mutex<()>,
}

/// The process's device, opened on first use: the driver, a context on device 0, and the compiled kernels.
fn device() -> Result<&'static Device, KernelError> {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            // cudarc panics where a library or symbol is missing; a missing device must never be a crash.
            catch_unwind(AssertUnwindSafe(Device::open))
                .unwrap_or_else(|_| Err("the CUDA driver or NVRTC could not be loaded".to_string()))
        })
        .as_ref()
        .map_err(|reason| KernelError::NoDevice { reason: reason.clone() })
}

/// The device reachability runs on, as `name (compute capability)`, or why there is none.
pub fn device_name() -> Result<String, KernelError> {
    device().map(|d| d.name.clone())
}

/// Whether [`Backend::Auto`] should fill these rows on the device: they are large enough to pay for the
/// transfers, and a device is present (only then is the driver loaded).
pub(crate) fn worth_it(graph: &Graph, layout: &Layout) -> bool {
    let n = u64::from(graph.nodes());
    let width = match layout {
        Layout::Clocks(cover) => cover.len().max(1) as u64,
        Layout::Bits => n.div_ceil(64).max(1),
    };
    let work = (n + graph.edges() as u64) * width;
    width >= GPU_FROM_WIDTH && work >= GPU_FROM_WORK && device().is_ok()
}

/// Fills `layout`'s rows for the acyclic `graph` (`order`: a topological order) on the device and copies
/// them back, so that queries are answered on the host as the CPU backends answer them.
pub(crate) fn reachability(
    graph: &Graph,
    order: &[u32],
    layout: Layout,
) -> Result<Box<dyn Reachability>, KernelError> {
    fill(graph, order, layout).map(|(reach, _)| reach)
}

/// Where the time of one fill on the device went, for the benchmark.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    /// On the host: ranking the nodes by level and laying out their successors.
    pub prepare_ms: f64,
    /// Copying the graph to the device.
    pub upload_ms: f64,
    /// The kernels.
    pub fill_ms: f64,
    /// Copying the rows back.
    pub download_ms: f64,
    /// The graph's levels.
    pub levels: usize,
    /// Kernel launches: one per wide level, one per run of narrow levels.
    pub launches: usize,
}

/// What [`Backend::Cuda`] computes, with where its time went.
pub fn fill_with_phases(
    graph: &Graph,
    chains: Option<&[Vec<u32>]>,
) -> Result<(Box<dyn Reachability>, Phases), KernelError> {
    let order = graph.topo_order()?;
    let layout = Layout::for_graph(graph, &order, chains)?;
    fill(graph, &order, layout)
}

fn fill(
    graph: &Graph,
    order: &[u32],
    layout: Layout,
) -> Result<(Box<dyn Reachability>, Phases), KernelError> {
    let device = device()?;
    let _one_at_a_time = device.busy.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut phases = Phases::default();
    let start = Instant::now();
    let by_rank = RankedGraph::new(graph, order);
    phases.prepare_ms = ms_since(start);
    phases.levels = by_rank.level_starts.len().saturating_sub(1);
    let filled: Box<dyn Reachability> = match layout {
        Layout::Clocks(cover) => Box::new(device.fill_clocks(&by_rank, cover, &mut phases).map_err(lost)?),
        Layout::Bits => Box::new(device.fill_bits(&by_rank, &mut phases).map_err(lost)?),
    };
    Ok((Box::new(OnDevice(filled)), phases))
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Cobra's closure (§5): bitset rows by repeated boolean squaring of the adjacency matrix on the device,
/// until a squaring changes nothing. For comparison in benchmarks and tests; [`Backend::Cuda`] fills level
/// by level instead, which costs far less.
pub fn squaring_closure(graph: &Graph) -> Result<Box<dyn Reachability>, KernelError> {
    graph.topo_order()?;
    let device = device()?;
    let _one_at_a_time = device.busy.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok(Box::new(OnDevice(Box::new(device.square_until_closed(graph).map_err(lost)?))))
}

/// A closure computed on the device, answered on the host.
struct OnDevice(Box<dyn Reachability>);

impl Reachability for OnDevice {
    fn reaches(&self, from: u32, to: u32) -> bool {
        self.0.reaches(from, to)
    }

    fn backend(&self) -> Backend {
        Backend::Cuda
    }
}

/// What can go wrong on a present device, as the caller sees it.
#[derive(Debug)]
enum DeviceError {
    Driver(DriverError),
    TooLarge { bytes: u64, free: u64 },
    HostTooLarge { bytes: u64 },
    RowTooWide { nodes: usize },
}

impl From<DriverError> for DeviceError {
    fn from(e: DriverError) -> Self {
        DeviceError::Driver(e)
    }
}

fn lost(e: DeviceError) -> KernelError {
    match e {
        DeviceError::Driver(e) => KernelError::NoDevice { reason: format!("the device failed: {e}") },
        DeviceError::TooLarge { bytes, free } => KernelError::NoDevice {
            reason: format!("the closure needs {bytes} bytes of device memory; {free} are free"),
        },
        DeviceError::HostTooLarge { bytes } => KernelError::TooLarge { bytes },
        DeviceError::RowTooWide { nodes } => KernelError::NoDevice {
            reason: format!("squaring keeps a row in 48 KiB of shared memory; {nodes} nodes' rows are wider"),
        },
    }
}

/// The graph as the level fill reads it: nodes renumbered by rank (level order, lowest level first), and
/// each rank's successors as ranks, in compressed sparse rows.
struct RankedGraph {
    /// Each node's rank.
    rank: Vec<u32>,
    /// The node at each rank.
    node_of_rank: Vec<u32>,
    /// Where each level starts, in ranks; the last entry is the number of nodes.
    level_starts: Vec<usize>,
    /// Rank `r`'s successors are `succ_rank[succ_start[r]..succ_start[r + 1]]`.
    succ_start: Vec<u64>,
    succ_rank: Vec<u32>,
}

impl RankedGraph {
    fn new(graph: &Graph, order: &[u32]) -> Self {
        let (node_of_rank, level_starts) = levels(graph, order);
        let mut rank = vec![0u32; node_of_rank.len()];
        for (r, &v) in node_of_rank.iter().enumerate() {
            rank[v as usize] = r as u32;
        }
        let mut succ_start = Vec::with_capacity(node_of_rank.len() + 1);
        let mut succ_rank = Vec::with_capacity(graph.edges());
        succ_start.push(0);
        for &v in &node_of_rank {
            succ_rank.extend(graph.successors(v).iter().map(|&s| rank[s as usize]));
            succ_start.push(succ_rank.len() as u64);
        }
        RankedGraph { rank, node_of_rank, level_starts, succ_start, succ_rank }
    }

    fn nodes(&self) -> usize {
        self.node_of_rank.len()
    }

    /// Each level as `(first rank, nodes)`, lowest first.
    fn levels(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.level_starts.windows(2).map(|w| (w[0] as u32, (w[1] - w[0]) as u32))
    }

    /// The launches that fill rows `width` entries wide: a wide level alone over the grid, a run of narrow
    /// ones in one block.
    fn launches(&self, width: u32) -> Vec<Launch> {
        let mut plan = Vec::new();
        let mut narrow_from = None;
        for (level, (lo, count)) in self.levels().enumerate() {
            let level = level as u32;
            if u64::from(count) * u64::from(width) <= NARROW_ENTRIES {
                narrow_from.get_or_insert(level);
                continue;
            }
            if let Some(first) = narrow_from.take() {
                plan.push(Launch::Narrow { first, last: level });
            }
            plan.push(Launch::Wide { lo, count });
        }
        if let Some(first) = narrow_from {
            plan.push(Launch::Narrow { first, last: (self.level_starts.len() - 1) as u32 });
        }
        plan
    }

    /// Bytes the graph itself takes on the device.
    fn device_bytes(&self) -> u64 {
        (self.succ_start.len() * 8 + self.succ_rank.len() * 4 + self.nodes() * 12) as u64
    }
}

/// One kernel launch of a fill.
enum Launch {
    /// One level of `count` ranks from `lo`, over the whole grid.
    Wide { lo: u32, count: u32 },
    /// Levels `first..last`, in one block.
    Narrow { first: u32, last: u32 },
}

impl Device {
    fn open() -> Result<Device, String> {
        // SAFETY: the probes only try to load a shared library by name; they run no code from it but its
        // initializers, which are the vendor's driver and compiler.
        let (driver, compiler) =
            unsafe { (cudarc::driver::sys::is_culib_present(), cudarc::nvrtc::sys::is_culib_present()) };
        if !driver {
            return Err("no CUDA driver (libcuda) on this machine".to_string());
        }
        if !compiler {
            return Err("no NVRTC (libnvrtc) on this machine's library path".to_string());
        }
        let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e}"))?;
        // SAFETY: every allocation is made, used and freed on the one stream below, in its order, so no
        // event needs to order uses across streams.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(|e| e.to_string())?;
        let name = format!("{} (sm_{major}{minor})", ctx.name().map_err(|e| e.to_string())?);
        let options = CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("closure.cu".to_string()),
            ..CompileOptions::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(SOURCE, options)
            .map_err(|e| format!("NVRTC could not compile the kernels: {e}"))?;
        let module = ctx.load_module(ptx).map_err(|e| format!("the kernels would not load: {e}"))?;
        let load = |name: &str| module.load_function(name).map_err(|e| format!("kernel {name}: {e}"));
        let sms = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| e.to_string())?;
        Ok(Device {
            name,
            stream: ctx.default_stream(),
            fill_clocks: load("fill_clock_level")?,
            fill_bits: load("fill_bit_level")?,
            fill_clocks_narrow: load("fill_clock_levels_in_one_block")?,
            fill_bits_narrow: load("fill_bit_levels_in_one_block")?,
            square: load("square_rows")?,
            max_blocks: (sms.max(1) as u32) * 32,
            busy: Mutex::new(()),
        })
    }

    /// A launch of `total` threads' worth of work, striding where it exceeds the grid.
    fn grid(&self, total: u64) -> LaunchConfig {
        let blocks = total.div_ceil(u64::from(THREADS)).clamp(1, u64::from(self.max_blocks)) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
    }

    /// Refuses a closure that would not fit in the device's free memory (or, copied back, in the host's).
    fn check_room(&self, rows_bytes: u64, graph_bytes: u64) -> Result<(), DeviceError> {
        if rows_bytes > MAX_CLOSURE_BYTES {
            return Err(DeviceError::HostTooLarge { bytes: rows_bytes });
        }
        let (free, _total) = self.stream.context().mem_get_info()?;
        let bytes = rows_bytes + graph_bytes;
        if bytes as f64 > free as f64 * DEVICE_SHARE {
            return Err(DeviceError::TooLarge { bytes, free: free as u64 });
        }
        Ok(())
    }

    fn fill_clocks(
        &self,
        g: &RankedGraph,
        cover: ChainCover,
        phases: &mut Phases,
    ) -> Result<ChainClocks, DeviceError> {
        let n = g.nodes();
        let width = cover.len().max(1);
        if n == 0 {
            return Ok(ChainClocks::from_rows(cover, Vec::new(), Vec::new()));
        }
        self.check_room((n * width * 4) as u64, g.device_bytes())?;
        let start = Instant::now();
        let own_chain: Vec<u32> = g.node_of_rank.iter().map(|&v| cover.chain[v as usize]).collect();
        let own_pos: Vec<u32> = g.node_of_rank.iter().map(|&v| cover.pos[v as usize]).collect();
        let level_starts: Vec<u32> = g.level_starts.iter().map(|&r| r as u32).collect();
        phases.prepare_ms += ms_since(start);
        let start = Instant::now();
        let s = &self.stream;
        let succ_start = s.clone_htod(&g.succ_start)?;
        let succ_rank = s.clone_htod(&g.succ_rank)?;
        let own_chain = s.clone_htod(&own_chain)?;
        let own_pos = s.clone_htod(&own_pos)?;
        let level_starts = s.clone_htod(&level_starts)?;
        // SAFETY: every entry is written by the fill before any read, so the allocation needs no zeroing.
        let mut rows: CudaSlice<u32> = unsafe { s.alloc(n * width) }?;
        s.synchronize()?;
        phases.upload_ms = ms_since(start);
        let start = Instant::now();
        let width = width as u32;
        let plan = g.launches(width);
        phases.launches = plan.len();
        for launch in plan {
            match launch {
                Launch::Wide { lo, count } => {
                    let mut args = s.launch_builder(&self.fill_clocks);
                    args.arg(&mut rows).arg(&succ_start).arg(&succ_rank).arg(&own_chain).arg(&own_pos);
                    args.arg(&lo).arg(&count).arg(&width);
                    // SAFETY: the arguments match fill_clock_level's parameters in type and order; `rows`
                    // holds `nodes × width` entries and every rank and successor index is below `nodes`, so
                    // each thread's reads and its one write stay in bounds; a level reads only earlier
                    // levels' rows, filled by earlier launches on this stream.
                    unsafe { args.launch(self.grid(u64::from(count) * u64::from(width))) }?;
                }
                Launch::Narrow { first, last } => {
                    let mut args = s.launch_builder(&self.fill_clocks_narrow);
                    args.arg(&mut rows).arg(&succ_start).arg(&succ_rank).arg(&own_chain).arg(&own_pos);
                    args.arg(&level_starts).arg(&first).arg(&last).arg(&width);
                    // SAFETY: as for the wide launch, for fill_clock_levels_in_one_block; `last` is at most
                    // the number of levels, and `level_starts` holds one more entry than that.
                    unsafe { args.launch(NARROW_BLOCK) }?;
                }
            }
        }
        s.synchronize()?;
        phases.fill_ms = ms_since(start);
        let start = Instant::now();
        let clocks = self.download(&rows)?;
        phases.download_ms = ms_since(start);
        Ok(ChainClocks::from_rows(cover, g.rank.clone(), clocks))
    }

    fn fill_bits(&self, g: &RankedGraph, phases: &mut Phases) -> Result<BitsetRows, DeviceError> {
        let n = g.nodes();
        let words = n.div_ceil(64).max(1);
        if n == 0 {
            return Ok(BitsetRows::from_rows(words, Vec::new(), Vec::new()));
        }
        self.check_room((n * words * 8) as u64, g.device_bytes())?;
        let level_starts: Vec<u32> = g.level_starts.iter().map(|&r| r as u32).collect();
        let start = Instant::now();
        let s = &self.stream;
        let succ_start = s.clone_htod(&g.succ_start)?;
        let succ_rank = s.clone_htod(&g.succ_rank)?;
        let node_of_rank = s.clone_htod(&g.node_of_rank)?;
        let level_starts = s.clone_htod(&level_starts)?;
        // SAFETY: every word is written by the fill before any read, so the allocation needs no zeroing.
        let mut rows: CudaSlice<u64> = unsafe { s.alloc(n * words) }?;
        s.synchronize()?;
        phases.upload_ms = ms_since(start);
        let start = Instant::now();
        let width = words as u32;
        let plan = g.launches(width);
        phases.launches = plan.len();
        for launch in plan {
            match launch {
                Launch::Wide { lo, count } => {
                    let mut args = s.launch_builder(&self.fill_bits);
                    args.arg(&mut rows).arg(&succ_start).arg(&succ_rank).arg(&node_of_rank);
                    args.arg(&lo).arg(&count).arg(&width);
                    // SAFETY: as in fill_clocks, for fill_bit_level; a node's own bit lies in word
                    // `node / 64`, below `words`.
                    unsafe { args.launch(self.grid(u64::from(count) * u64::from(width))) }?;
                }
                Launch::Narrow { first, last } => {
                    let mut args = s.launch_builder(&self.fill_bits_narrow);
                    args.arg(&mut rows).arg(&succ_start).arg(&succ_rank).arg(&node_of_rank);
                    args.arg(&level_starts).arg(&first).arg(&last).arg(&width);
                    // SAFETY: as in fill_clocks' narrow launch, for fill_bit_levels_in_one_block.
                    unsafe { args.launch(NARROW_BLOCK) }?;
                }
            }
        }
        s.synchronize()?;
        phases.fill_ms = ms_since(start);
        let start = Instant::now();
        let rows = self.download(&rows)?;
        phases.download_ms = ms_since(start);
        Ok(BitsetRows::from_rows(words, g.rank.clone(), rows))
    }

    /// Copies rows back to the host. The driver copies into pageable memory through a small buffer of its
    /// own, on one thread, faulting in every fresh page as it goes: 1.2 GB/s on an H200, 6.5 s for 8 GB of
    /// clocks, many times the fill itself. Large rows instead come through one page-locked buffer at the
    /// copy engine's speed, and every core copies each chunk into place.
    fn download<T>(&self, rows: &CudaSlice<T>) -> Result<Vec<T>, DeviceError>
    where
        T: DeviceRepr + ValidAsZeroBits + Default + Copy + Send + Sync,
    {
        let len = rows.len();
        let chunk = STAGING_BYTES / std::mem::size_of::<T>();
        if len <= chunk {
            return Ok(self.stream.clone_dtoh(rows)?);
        }
        // SAFETY: each chunk is copied into the buffer before it is read; plain flags (not write-combined)
        // keep it fast for the host to read.
        let mut staging = unsafe { self.stream.context().alloc_pinned_with_flags::<T>(chunk, 0) }?;
        let mut host = vec![T::default(); len];
        for start in (0..len).step_by(chunk) {
            let end = (start + chunk).min(len);
            // The copy takes exactly the staged slice's length, so the slice must match the chunk.
            let staged = &mut staging.as_mut_slice()?[..end - start];
            self.stream.memcpy_dtoh(&rows.slice(start..end), staged)?;
            self.stream.synchronize()?;
            host[start..end]
                .par_chunks_mut(1 << 18)
                .zip(staged.par_chunks(1 << 18))
                .for_each(|(to, from)| to.copy_from_slice(from));
        }
        Ok(host)
    }

    fn square_until_closed(&self, graph: &Graph) -> Result<BitsetRows, DeviceError> {
        let n = graph.nodes() as usize;
        let words = n.div_ceil(64).max(1);
        if n == 0 {
            return Ok(BitsetRows::from_rows(words, Vec::new(), Vec::new()));
        }
        if words * 8 > 48 << 10 {
            return Err(DeviceError::RowTooWide { nodes: n });
        }
        self.check_room((2 * n * words * 8) as u64, 0)?;
        let mut adjacency = vec![0u64; n * words];
        for v in 0..graph.nodes() {
            let row = &mut adjacency[v as usize * words..][..words];
            for &t in graph.successors(v).iter().chain([&v]) {
                row[t as usize / 64] |= 1 << (t % 64);
            }
        }
        let s = &self.stream;
        let mut current = s.clone_htod(&adjacency)?;
        let mut next: CudaSlice<u64> = s.alloc_zeros(n * words)?;
        let mut changed: CudaSlice<u32> = s.alloc_zeros(1)?;
        let (n32, words32) = (n as u32, words as u32);
        let config = LaunchConfig {
            grid_dim: (n32.clamp(1, self.max_blocks * 4), 1, 1),
            block_dim: (words32.clamp(32, THREADS), 1, 1),
            shared_mem_bytes: words32 * 8,
        };
        // Each squaring at least doubles the path length every row covers, so 33 squarings close any
        // graph of 2³² nodes; the loop ends as soon as one changes nothing.
        for _ in 0..33 {
            s.memset_zeros(&mut changed)?;
            let mut launch = s.launch_builder(&self.square);
            launch.arg(&current).arg(&mut next).arg(&n32).arg(&words32).arg(&mut changed);
            // SAFETY: square_rows takes (in, out, n, words, changed); both matrices hold `n × words` words,
            // every set bit names a node below `n`, and the shared row holds `words` words as configured.
            unsafe { launch.launch(config) }?;
            std::mem::swap(&mut current, &mut next);
            if s.clone_dtoh(&changed)?[0] == 0 {
                break;
            }
        }
        let rows = s.clone_dtoh(&current)?;
        Ok(BitsetRows::from_rows(words, (0..n as u32).collect(), rows))
    }
}
