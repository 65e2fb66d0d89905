//! A hint at mount time for virtual machines whose idle vCPUs halt at once.
//!
//! Every FUSE request wakes a daemon thread, and its reply wakes the process that made it. When
//! the CPU to wake is idle and halted, a guest pays an exit to the host for it; with the
//! `haltpoll` cpuidle driver and governor and the governor's `guest_halt_poll_ns` at 0 every
//! idle vCPU halts at once, and a metadata-heavy job through the mount (or any FUSE mount)
//! runs at about half the speed it gets with some polling (design.md, "Where a round trip's
//! time goes"). The setting is the machine's, so the daemon only says so, once, in its log.

use std::path::Path;

const DRIVER: &str = "/sys/devices/system/cpu/cpuidle/current_driver";
const GOVERNOR: &str = "/sys/devices/system/cpu/cpuidle/current_governor";
const POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// The hint for this machine, if its idle vCPUs halt without polling.
pub(crate) fn halt_hint() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(Path::new(p)).ok();
    let governor = read(GOVERNOR)?;
    hint_for(read(DRIVER)?.trim(), governor.trim(), read(POLL_NS)?.trim())
}

/// The hint for cpuidle driver `driver`, governor `governor` and `guest_halt_poll_ns` =
/// `poll_ns` (the governor's parameter: it means nothing under another governor).
fn hint_for(driver: &str, governor: &str, poll_ns: &str) -> Option<String> {
    (driver == "haltpoll" && governor == "haltpoll" && poll_ns == "0").then(|| {
        format!(
            "idle vCPUs halt without polling ({POLL_NS} is 0): each request through a FUSE \
             mount pays for waking halted CPUs; a few hundred microseconds of polling (e.g. \
             200000) makes small-file work about twice as fast (README, \"Virtual machines\")"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::hint_for;

    #[test]
    fn only_a_haltpoll_guest_without_polling_gets_the_hint() {
        let hint = hint_for("haltpoll", "haltpoll", "0");
        assert!(hint.is_some_and(|h| h.contains("guest_halt_poll_ns")));
        assert!(hint_for("haltpoll", "haltpoll", "200000").is_none());
        assert!(hint_for("haltpoll", "menu", "0").is_none());
        assert!(hint_for("intel_idle", "menu", "0").is_none());
        assert!(hint_for("acpi_idle", "ladder", "").is_none());
    }
}
