//! From one answer to the next: which endpoints to insert and which to
//! remove, and the bound on how many the balancer holds.

use std::{collections::BTreeSet, net::SocketAddr};

/// The set the balancer should hold after `answer`, at most `max` addresses.
///
/// Addresses already held come first, so a name with more than `max`
/// addresses does not churn connections from one answer to the next; new
/// ones fill what is left, lowest first.
pub fn next_set(
    held: &BTreeSet<SocketAddr>,
    answer: &[SocketAddr],
    max: usize,
) -> BTreeSet<SocketAddr> {
    let answer: BTreeSet<SocketAddr> = answer.iter().copied().collect();
    let kept = answer.intersection(held).copied();
    let added = answer.difference(held).copied();
    kept.chain(added).take(max).collect()
}

/// What changed between two sets: (inserted, removed).
pub fn diff(
    held: &BTreeSet<SocketAddr>,
    next: &BTreeSet<SocketAddr>,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    (
        next.difference(held).copied().collect(),
        held.difference(next).copied().collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(ports: &[u16]) -> Vec<SocketAddr> {
        ports
            .iter()
            .map(|&p| SocketAddr::from(([10, 0, 0, 1], p)))
            .collect()
    }

    fn set(ports: &[u16]) -> BTreeSet<SocketAddr> {
        addrs(ports).into_iter().collect()
    }

    #[test]
    fn inserts_the_new_and_removes_the_gone() {
        let held = set(&[1, 2, 3]);
        let next = next_set(&held, &addrs(&[2, 3, 4]), 64);
        assert_eq!(next, set(&[2, 3, 4]));
        assert_eq!(diff(&held, &next), (addrs(&[4]), addrs(&[1])));
    }

    #[test]
    fn the_same_answer_changes_nothing() {
        let held = set(&[1, 2]);
        let next = next_set(&held, &addrs(&[2, 1, 2]), 64);
        assert_eq!(diff(&held, &next), (vec![], vec![]));
    }

    #[test]
    fn over_the_bound_the_held_addresses_stay() {
        // Given two held addresses and a bound of three,
        let held = set(&[8, 9]);
        // when the answer grows to five,
        let next = next_set(&held, &addrs(&[1, 2, 3, 8, 9]), 3);
        // the two stay and the lowest new one fills the third place.
        assert_eq!(next, set(&[1, 8, 9]));
    }
}
