//! Which waiting request an idle I/O worker starts next: the decision only, made from the
//! queue lengths and the running counts the pool (`iopool.rs`) owns; the pool does the rest.
//!
//! Rules, per class ([`IoClass`]):
//! * a priority request is started before waiting normal ones;
//! * the normal class never occupies more than `workers - reserved` workers (`reserved`:
//!   [`reserved_for_priority`]), so a backup's misses, and the read-ahead that rides on them,
//!   always leave a worker free for a priority miss;
//! * starvation of the normal class is bounded: while a normal request waits and the normal
//!   class is under its cap, at most [`PRIORITY_RUN`] priority requests start in a row before
//!   a normal one does, so the normal class gets at least one start in every
//!   `PRIORITY_RUN + 1` at any priority load;
//! * no worker idles while a request it may start waits (work-conserving).

use crate::iopool::IoClass;

/// Priority requests started in a row while a normal one could have started, at most.
pub const PRIORITY_RUN: u32 = 3;

/// Workers the normal class cannot occupy: a quarter, at least one of two or more.
pub(crate) fn reserved_for_priority(workers: usize) -> usize {
    if workers < 2 {
        0
    } else {
        workers.div_ceil(4)
    }
}

/// What the pool has at one moment, per class (index: [`IoClass::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) queued: [usize; 2],
    pub(crate) in_flight: [usize; 2],
}

/// The scheduling decision of one pool (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    workers: usize,
    reserved: usize,
    /// Priority starts in a row while a normal request could have started instead.
    priority_run: u32,
}

impl Policy {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            workers,
            reserved: reserved_for_priority(workers),
            priority_run: 0,
        }
    }

    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Workers the normal class may occupy at once.
    pub(crate) fn normal_cap(&self) -> usize {
        self.workers - self.reserved
    }

    /// The class whose oldest waiting request an idle worker starts now, if any may start;
    /// the caller starts it (moves one request of that class from queued to in flight).
    pub(crate) fn pick(&mut self, load: &Load) -> Option<IoClass> {
        if load.in_flight[0] + load.in_flight[1] >= self.workers {
            return None;
        }
        let p = load.queued[IoClass::Priority.index()] > 0;
        let n = load.queued[IoClass::Normal.index()] > 0
            && load.in_flight[IoClass::Normal.index()] < self.normal_cap();
        let class = match (p, n) {
            (true, true) if self.priority_run < PRIORITY_RUN => {
                self.priority_run += 1;
                return Some(IoClass::Priority);
            }
            (true, true) | (false, true) => IoClass::Normal,
            (true, false) => IoClass::Priority,
            (false, false) => return None,
        };
        // A normal start, or a priority one no normal request could have had: the run ends.
        self.priority_run = 0;
        Some(class)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const P: usize = 0;
    const N: usize = 1;

    #[test]
    fn reserve_is_a_quarter_and_at_least_one() {
        assert_eq!(reserved_for_priority(0), 0);
        assert_eq!(reserved_for_priority(1), 0);
        assert_eq!(reserved_for_priority(2), 1);
        assert_eq!(reserved_for_priority(4), 1);
        assert_eq!(reserved_for_priority(8), 2);
        assert_eq!(reserved_for_priority(9), 3);
    }

    #[test]
    fn priority_goes_first_and_normal_gets_one_start_in_four() {
        let mut pol = Policy::new(2);
        let mut order = String::new();
        let load = Load {
            queued: [10, 10],
            in_flight: [0, 0],
        };
        for _ in 0..8 {
            let c = pol.pick(&load).unwrap();
            order.push(if c == IoClass::Priority { 'P' } else { 'N' });
        }
        assert_eq!(order, "PPPNPPPN");
        // With the normal class at its cap, priority requests start back to back.
        let capped = Load {
            queued: [10, 10],
            in_flight: [0, 1],
        };
        for _ in 0..5 {
            assert_eq!(pol.pick(&capped), Some(IoClass::Priority));
        }
    }

    #[test]
    fn nothing_starts_when_every_worker_is_busy() {
        let mut pol = Policy::new(4);
        let load = Load {
            queued: [1, 1],
            in_flight: [1, 3],
        };
        assert_eq!(pol.pick(&load), None);
    }

    /// One step of a random run: a request arrives in a class, a running one finishes, or an
    /// idle worker asks for work.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        Arrive(usize),
        Finish(usize),
        Start,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0..2usize).prop_map(Event::Arrive),
            (0..2usize).prop_map(Event::Finish),
            Just(Event::Start),
        ]
    }

    proptest! {
        /// Over any arrivals and completions: the normal class stays within its cap, the
        /// workers within their number, a priority request is chosen whenever the run bound
        /// allows, no more than PRIORITY_RUN priority starts happen in a row while a normal
        /// request could start, and no request that may start is left waiting.
        #[test]
        fn order_cap_starvation_bound_and_no_idle_worker(
            workers in 1usize..12,
            events in proptest::collection::vec(event(), 1..400),
        ) {
            let mut pol = Policy::new(workers);
            let mut load = Load::default();
            let mut run = 0u32;
            for e in events {
                match e {
                    Event::Arrive(c) => load.queued[c] += 1,
                    Event::Finish(c) => load.in_flight[c] = load.in_flight[c].saturating_sub(1),
                    Event::Start => {
                        let busy = load.in_flight[P] + load.in_flight[N];
                        let p_may = load.queued[P] > 0 && busy < workers;
                        let n_may = load.queued[N] > 0
                            && load.in_flight[N] < pol.normal_cap()
                            && busy < workers;
                        let before = pol.priority_run;
                        let got = pol.pick(&load);
                        match got {
                            Some(IoClass::Priority) => {
                                prop_assert!(p_may);
                                if n_may {
                                    run += 1;
                                    prop_assert!(run <= PRIORITY_RUN, "normal starved");
                                } else {
                                    run = 0;
                                }
                                load.queued[P] -= 1;
                                load.in_flight[P] += 1;
                            }
                            Some(IoClass::Normal) => {
                                prop_assert!(n_may);
                                // Normal only when no priority waits or the run is spent.
                                prop_assert!(!p_may || before >= PRIORITY_RUN);
                                run = 0;
                                load.queued[N] -= 1;
                                load.in_flight[N] += 1;
                            }
                            None => prop_assert!(!p_may && !n_may, "a worker idled"),
                        }
                    }
                }
                prop_assert!(load.in_flight[N] <= pol.normal_cap());
                prop_assert!(load.in_flight[P] + load.in_flight[N] <= workers);
                if workers >= 2 {
                    prop_assert!(pol.reserved() >= 1);
                }
            }
        }
    }
}
