//! The system under soak: `horos-ref run` started on the configuration the bench writes, as a
//! user would start it, and what the bench reads of its processes (`/proc`).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use horos_fakeai::{FakeConfig, FakeProcess};
use horos_testkit::{free_port, free_ports, sha256_hex};

use super::http::Http;
use crate::BenchResult;

/// The admin key of `/api/*`, `/metrics` and `/health/ready`.
pub const ADMIN_KEY: &str = "soak-admin-key";

/// The data-plane keys: `(name, key, x_priority it asks)`, most important first.
pub const KEYS: [(&str, &str, i32); 3] = [
    ("gold", "sk-soak-gold-0123456789", 0),
    ("silver", "sk-soak-silver-0123456789", 5),
    ("bronze", "sk-soak-bronze-0123456789", 9),
];

/// The lane's queue and model (chat on GPU 0).
pub const LANE: &str = "chat";
/// The lane's model name, also chatted with through the coordinator.
pub const LANE_MODEL: &str = "chat-model";
/// The pooled models on GPU 1 (8,000 MB): any two of the first two fit, the third evicts.
pub const POOL: [(&str, u64); 3] = [("pool-a", 3000), ("pool-b", 3000), ("pool-c", 4000)];

/// `run`, its directory and its listeners.
pub struct System {
    /// `horos-ref run`.
    pub run: Child,
    /// The data plane (`/v1/*`).
    pub data: Http,
    /// The control plane (`/api/*`, `/metrics`, `/health*`).
    pub control: Http,
    /// Where the configuration, the database and the inbox are.
    pub dir: PathBuf,
    /// The inbox the documents are dropped in.
    pub inbox: PathBuf,
    /// The small tmpfs `dir` is on, when the bench could mount one (the disk-full phase).
    pub tmpfs: Option<PathBuf>,
    /// run's log (stderr).
    pub log: PathBuf,
    /// The documents' upstream (embeddings and the page reader), the bench's own child.
    docs_upstream: FakeProcess,
    _temp: tempfile::TempDir,
}

/// A sibling binary of this one (`target/<profile>/NAME`).
pub fn sibling(name: &str) -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .ok_or("the bench binary has no directory")?
        .join(name);
    if !path.is_file() {
        return Err(format!(
            "{} is missing: build it in the same profile (cargo build [--release] -p horos-ref -p horos-fakeai)",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// The size of the tmpfs the data directory is on.
const TMPFS_MB: u64 = 1024;

impl System {
    /// Writes the configuration and starts `run` on it; returns once its control plane
    /// answers `/health` (within 120 s).
    ///
    /// # Errors
    ///
    /// A binary missing, `run` exiting, or no answer in time.
    pub fn start() -> BenchResult<System> {
        let horos_ref = sibling("horos-ref")?;
        let fakeai = sibling("horos-fakeai")?;
        let temp = tempfile::Builder::new().prefix("horos-soak-").tempdir()?;
        let dir = temp.path().join("data");
        fs::create_dir_all(&dir)?;
        let tmpfs = mount_tmpfs(&dir);
        let docs_upstream = FakeProcess::spawn_binary(
            &fakeai,
            &FakeConfig {
                latency: Duration::from_millis(40),
                embedding_dim: 16,
                slots: 8,
                ..FakeConfig::default()
            },
        )?;
        let (data_port, control_port) = (free_port(), free_port());
        let config = config(&fakeai, data_port, control_port, docs_upstream.url());
        let path = dir.join("horos.toml");
        fs::write(&path, config)?;
        let inbox = dir.join("inbox");
        fs::create_dir_all(&inbox)?;
        let log = temp.path().join("run.log");
        let run = Command::new(&horos_ref)
            .arg("--config")
            .arg(&path)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log)?)
            .spawn()?;
        let mut system = System {
            run,
            data: Http {
                addr: SocketAddr::from(([127, 0, 0, 1], data_port)),
            },
            control: Http {
                addr: SocketAddr::from(([127, 0, 0, 1], control_port)),
            },
            dir,
            inbox,
            tmpfs,
            log,
            docs_upstream,
            _temp: temp,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = system.run.try_wait()? {
                return Err(format!(
                    "horos-ref run exited at start ({status}): {}",
                    system.log_tail()
                )
                .into());
            }
            let up = system
                .control
                .call("GET", "/health", None, None, Duration::from_secs(2))
                .is_ok_and(|r| r.status == 200);
            if up {
                return Ok(system);
            }
            if Instant::now() > deadline {
                return Err(
                    format!("run did not answer /health in 120 s: {}", system.log_tail()).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last 40 lines of run's log.
    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Whether run still runs (`Some(status)` once it exited).
    pub fn exited(&mut self) -> Option<String> {
        match self.run.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Stops run (SIGTERM, then SIGKILL after 60 s) and the documents' upstream, and unmounts
    /// the tmpfs.
    pub fn stop(&mut self) -> Option<i32> {
        let pid = self.run.id() as i32;
        // SAFETY: a signal to our own child, which we have not waited for yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let code = loop {
            if let Ok(Some(s)) = self.run.try_wait() {
                break s.code();
            }
            if Instant::now() > deadline {
                let _ = self.run.kill();
                let _ = self.run.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = self.docs_upstream.kill();
        if let Some(mount) = self.tmpfs.take() {
            let _ = Command::new("umount").arg("-l").arg(&mount).status();
        }
        code
    }
}

/// Mounts a tmpfs of [`TMPFS_MB`] on `dir` (root only); `None` where it cannot.
fn mount_tmpfs(dir: &Path) -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_MB}m"), "tmpfs"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| dir.to_path_buf())
}

/// The one configuration: a lane (chat, its fakeai server managed by run) on GPU 0, a pool of
/// three models (fakeai with vLLM's sleep API) on GPU 1, both GPUs simulated, the allocator,
/// three keys with limits and priorities, ingest read by a fakeai vision model.
fn config(fakeai: &Path, data_port: u16, control_port: u16, docs_url: &str) -> String {
    let (lane_port, pool_port) = (free_ports(2), free_ports(8));
    let fake = |args: &[&str]| {
        let mut cmd = vec![fakeai.display().to_string()];
        cmd.extend(args.iter().map(|a| (*a).to_owned()));
        serde_json::to_string(&cmd).unwrap_or_default()
    };
    let mut out = format!(
        "database = \"jobs.db\"\n\
         [feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nhealth_interval_s = 2.0\nrelease_delay_ms = 500\n\
         [queue]\nretain_done_s = 0\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [8000, 8000]\ninterval_ms = 1000\n\
         host_memory_mb = 100000\nhistory_s = 300\n\
         [allocator]\ngpus = [0, 1]\ninitial = [\"{LANE}\", \"pool\"]\ntick_s = 1.0\nmin_dwell_s = 86400\n\
         [allocator.pool]\nswap_in_s = 2.0\njob_s = 1.0\n\
         [coordinator]\nbind = \"127.0.0.1:{data_port}\"\ncontrol_bind = \"127.0.0.1:{control_port}\"\n\
         api_key = \"{ADMIN_KEY}\"\ndefault_budget_s = 60.0\nper_model_concurrency = 8\n\
         write_timeout_s = 10.0\nmax_attempts = 3\njob_visibility_s = 60\n"
    );
    let limits = [
        "max_concurrency = 8\ntop_priority = 0\n",
        "max_concurrency = 6\nrpm = 1200\ntop_priority = 3\n",
        "max_concurrency = 1\nrpm = 30\ntpm = 3000\ntop_priority = 9\n",
    ];
    for ((name, key, _), limit) in KEYS.iter().zip(limits) {
        out += &format!(
            "[coordinator.keys.{name}]\nkey_sha256 = \"{}\"\n{limit}",
            sha256_hex(key)
        );
    }
    out += &format!(
        "[coordinator.pool]\nport_min = {pool_port}\nport_max = {}\nmargin_mb = 0\n\
         start_timeout_s = 60\nsleep = true\nstay_asleep_s = 120\nreclaim_delay_ms = 100\n",
        pool_port + 7
    );
    for (name, mb) in POOL {
        out += &format!(
            "[[coordinator.pool.model]]\nname = \"{name}\"\ncategory = \"llm\"\nvram_mb = {mb}\n\
             stay_warm_s = 2\ncommand = {}\n",
            fake(&[
                "--port",
                "{port}",
                "--model",
                name,
                "--slots",
                "4",
                "--latency-ms",
                "120",
                "--chunk-latency-ms",
                "15",
                "--startup-delay-ms",
                "1500",
                "--enable-sleep-mode",
                "--sleep-latency-ms",
                "200",
                "--wake-l1-latency-ms",
                "400",
                "--wake-l2-latency-ms",
                "900",
            ])
        );
    }
    out += &format!(
        "[[lane]]\nqueue = \"{LANE}\"\nurl = \"http://127.0.0.1:{lane_port}\"\nmodel = \"{LANE_MODEL}\"\n\
         batch_size = 4\nstart_wait_s = 30\nvram_mb = 2000\nmax_attempts = 5\nrequest_timeout_s = 30\n\
         visibility_s = 60\ncommand = {}\n",
        fake(&[
            "--port",
            "{port}",
            "--model",
            LANE_MODEL,
            "--slots",
            "4",
            "--latency-ms",
            "150",
            "--chunk-latency-ms",
            "20",
        ])
    );
    out += &format!(
        "[ingest]\ninbox = \"inbox\"\ndir = \"ingest\"\nreader = \"openai\"\nvision_url = \"{docs_url}\"\n\
         vision_model = \"fake-model\"\nvision_fallback = false\ndetect_rotation = false\n\
         embeddings_url = \"{docs_url}\"\nembeddings_model = \"fake-model\"\ndpi = 50.0\n\
         retry_delay_s = 5\nmax_attempts = 2\nmax_decoded_mb = 256\n"
    );
    out
}

/// One process of the system: run or one of its descendants.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// What it is: `run`, or its command's name and `--model` (a fakeai server's).
    pub name: String,
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kb: u64,
    /// Its anonymous part, KiB (`RssAnon`: the heap and stacks, not the binary's pages).
    pub anon_kb: u64,
    /// Open file descriptors (entries of `/proc/PID/fd`).
    pub fds: u64,
}

/// run (`root`) and every process under it, read from `/proc`.
pub fn tree(root: u32) -> Vec<Proc> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // The fields after the command's `(...)`: state, ppid, ...
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut family = vec![root];
    let mut i = 0;
    while i < family.len() {
        let p = family[i];
        family.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    family
        .into_iter()
        .filter_map(|pid| read_proc(pid, pid == root))
        .collect()
}

fn read_proc(pid: u32, is_run: bool) -> Option<Proc> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let (rss_kb, anon_kb) = (kib("VmRSS:"), kib("RssAnon:"));
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    let name = if is_run {
        "run".to_owned()
    } else {
        let args = cmdline(pid);
        let exe = args
            .first()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_owned())
            .unwrap_or_default();
        match args
            .iter()
            .position(|a| a == "--model")
            .and_then(|i| args.get(i + 1))
        {
            Some(model) => format!("{exe}:{model}"),
            None => exe,
        }
    };
    Some(Proc {
        pid,
        name,
        rss_kb,
        anon_kb,
        fds,
    })
}

/// A process's command line.
pub fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}
