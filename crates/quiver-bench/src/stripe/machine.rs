//! How busy the two pinned CPUs were during a transfer, from `/proc/stat`: all the time
//! spent on them, also in softirq and in kernel threads, which `getrusage` of the two
//! processes does not count (veth, tbf and the receive path run largely there).

/// Busy and total jiffies of each of two CPUs at one moment.
pub(crate) struct CpuTimes {
    cpus: [usize; 2],
    busy_total: [(u64, u64); 2],
}

impl CpuTimes {
    /// Reads the counters of `cpus` now (zeros if `/proc/stat` cannot be read).
    pub(crate) fn now(cpus: [usize; 2]) -> CpuTimes {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CpuTimes {
            cpus,
            busy_total: cpus.map(|cpu| busy_total(&text, cpu)),
        }
    }

    /// The share of time each CPU was busy since `self` was read.
    pub(crate) fn busy_since(&self) -> [f64; 2] {
        let later = CpuTimes::now(self.cpus);
        [0, 1].map(|side| {
            let (busy_before, total_before) = self.busy_total[side];
            let (busy, total) = later.busy_total[side];
            busy.saturating_sub(busy_before) as f64
                / total.saturating_sub(total_before).max(1) as f64
        })
    }
}

/// (busy, total) jiffies of `cpu` in `/proc/stat` text: busy is all but idle and iowait.
fn busy_total(stat: &str, cpu: usize) -> (u64, u64) {
    let name = format!("cpu{cpu}");
    let Some(line) = stat
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name.as_str()))
    else {
        return (0, 0);
    };
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_leaves_out_idle_and_iowait() {
        let stat =
            "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 10 0 5 80 5 0 0 0 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(busy_total(stat, 0), (15, 100));
        assert_eq!(busy_total(stat, 1), (27, 36));
        assert_eq!(busy_total(stat, 7), (0, 0));
    }
}
