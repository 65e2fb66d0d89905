//! The checks of the dirty-block part of the contract: kept until cleaned, cleaned only with
//! the sequence they were read at, rewritten in place, (persistent tiers) kept across a
//! reopen; and the roles (`Cleaning`, `Persistence`) offered where `TierInfo` says.

use super::*;

/// Dirty blocks stay, under any pressure of clean stores, until `mark_clean`.
pub fn dirty_blocks_stay_until_mark_clean(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    let d = dirty(&s, 4).expect("a tier with dirty blocks");
    // Held dirty blocks the check does not use stay dirty throughout.
    let others = if s.info().accepts_dirty {
        0
    } else {
        (s.held_dirty.len() - d.len()) as u64
    };
    if s.takes_stores {
        let n = (s.info().capacity_blocks * 2).min(8192);
        for i in 0..n {
            let k = key(100 + i / 64, i % 64);
            let b = bytes(&k, V, 0, bs(&s));
            let _ = s
                .tier
                .fill(&k, V, Class::NORMAL, &b, &yes)
                .expect(TIER_FAILED);
        }
    }
    let want = d.len() as u64 + others;
    assert_eq!(s.tier.stats().dirty_blocks, want, "{name}: dirty count");
    let listed = cleaning(&s).dirty_blocks(usize::MAX);
    for (k, v, b) in &d {
        let (seq, got) = read_dirty(&s, k, *v).unwrap_or_else(|| panic!("{name}: lost {k:?}"));
        assert_eq!(&got, b, "{name}: dirty bytes of {k:?}");
        let l = listed.iter().find(|x| x.key == *k);
        let l = l.unwrap_or_else(|| panic!("{name}: {k:?} not listed dirty"));
        assert_eq!(
            (l.version, l.seq),
            (*v, seq),
            "{name}: listed version and seq"
        );
    }
    let cleaned = s.tier.stats().cleaned;
    for (k, v, _) in &d {
        let (seq, _) = read_dirty(&s, k, *v).expect(NO_DIRTY_COPY);
        assert!(
            cleaning(&s).mark_clean(k, seq),
            "{name}: mark_clean of {k:?}"
        );
        assert!(read_dirty(&s, k, *v).is_none(), "{name}: clean now");
        assert!(!is_listed_dirty(&s, k), "{name}: no longer listed");
        match read(&s, k, *v).0 {
            Lookup::Hit { dirty } => assert!(!dirty, "{name}: a cleaned block reads clean"),
            Lookup::Miss => {}
        }
    }
    let st = s.tier.stats();
    assert_eq!(st.dirty_blocks, others, "{name}: no dirty block left");
    if s.takes_stores {
        assert_eq!(
            st.cleaned,
            cleaned + d.len() as u64,
            "{name}: cleaned counts them"
        );
    }
}

/// `mark_clean` with the seq of before a rewrite returns false and the block stays dirty.
pub fn mark_clean_with_an_old_seq_after_a_rewrite_fails(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    assert!(s.info().accepts_dirty);
    let k = key(6, 0);
    let d1 = bytes(&k, V, 1, bs(&s));
    let d2 = bytes(&k, V, 2, bs(&s));
    assert_eq!(
        s.tier
            .write_dirty(&k, V, Class::NORMAL, &d1)
            .expect(TIER_FAILED),
        Admit::Stored
    );
    let (seq1, _) = read_dirty(&s, &k, V).expect(NO_DIRTY_COPY);
    assert_eq!(
        s.tier
            .write_dirty(&k, V, Class::NORMAL, &d2)
            .expect(TIER_FAILED),
        Admit::Stored
    );
    assert!(
        !cleaning(&s).mark_clean(&k, seq1),
        "{name}: an old seq cleaned a rewritten block"
    );
    let (seq2, got) = read_dirty(&s, &k, V).unwrap_or_else(|| panic!("{name}: no longer dirty"));
    assert_eq!(got, d2, "{name}: the rewrite's bytes");
    assert_ne!(seq1, seq2, "{name}: a rewrite changes the seq");
    assert!(is_listed_dirty(&s, &k), "{name}: still listed");
    assert!(
        cleaning(&s).mark_clean(&k, seq2),
        "{name}: the current seq cleans"
    );
}

/// `write_dirty` of a block held dirty with the same version is never `Rejected`, even when
/// the tier is full of dirty blocks.
pub fn a_dirty_rewrite_of_the_same_version_is_never_rejected(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    assert!(s.info().accepts_dirty);
    let k = key(10, 0);
    let d = bytes(&k, V, 1, bs(&s));
    assert_eq!(
        s.tier
            .write_dirty(&k, V, Class::NORMAL, &d)
            .expect(TIER_FAILED),
        Admit::Stored
    );
    let n = (s.info().capacity_blocks * 2).min(8192);
    let mut full = false;
    for i in 0..n {
        let o = key(300 + i / 64, i % 64);
        let b = bytes(&o, V, 0, bs(&s));
        if s.tier
            .write_dirty(&o, V, Class::NORMAL, &b)
            .expect(TIER_FAILED)
            == Admit::Rejected
        {
            full = true;
            break;
        }
    }
    assert!(
        full || n == 8192,
        "{name}: {n} dirty blocks into {} all taken",
        s.info().capacity_blocks
    );
    for seed in 2..5 {
        let d = bytes(&k, V, seed, bs(&s));
        let a = s
            .tier
            .write_dirty(&k, V, Class::NORMAL, &d)
            .expect(TIER_FAILED);
        assert_eq!(
            a,
            Admit::Stored,
            "{name}: a rewrite of a held dirty block (full: {full})"
        );
        assert_eq!(
            read_dirty(&s, &k, V).map(|x| x.1),
            Some(d),
            "{name}: rewritten bytes"
        );
    }
}

/// A persistent tier keeps synced dirty blocks and their file's meta across a reopen.
pub fn dirty_blocks_and_file_meta_survive_a_reopen(make: Make<'_>) {
    let mut s = make();
    let name = s.info().name.clone();
    assert!(s.info().persistent && s.info().accepts_dirty);
    let reopen = s
        .reopen
        .take()
        .unwrap_or_else(|| panic!("{name}: persistent, no reopen"));
    let meta = FileMeta {
        size: 3 * bs(&s) as u64 - 100,
        mtime_ns: 1_700_000_000_123_456_789,
        handle: FileHandle {
            kind: 1,
            bytes: vec![1, 2, 3, 4, 5, 6, 7, 8],
        },
    };
    s.tier
        .persistence()
        .unwrap_or_else(|| panic!("{name}: persistent, offers no persistence"))
        .set_file_meta(&file(50), &meta);
    let d = dirty(&s, 3).expect(NO_DIRTY_COPY);
    s.tier.sync().expect(TIER_FAILED);
    let keep = std::mem::take(&mut s._keep);
    drop(s);
    let t = reopen();
    let rec = t.persistence().expect("persistent").recovered_files();
    let f = rec.iter().find(|r| r.file == file(50));
    let f = f.unwrap_or_else(|| panic!("{name}: recovered {rec:?}"));
    assert_eq!(
        (f.version, f.dirty_blocks, f.meta.as_ref()),
        (V, 3, Some(&meta)),
        "{name}"
    );
    for (k, v, b) in &d {
        let mut buf = vec![0u8; t.info().block_size];
        assert!(
            t.cleaning()
                .is_some_and(|c| c.read_dirty(k, *v, &mut buf).expect(TIER_FAILED).is_some()),
            "{name}: {k:?} lost"
        );
        assert_eq!(&buf, b, "{name}: {k:?} bytes after reopen");
    }
    drop(t);
    drop(keep);
}

/// A tier offers [`Cleaning`] wherever it can hold dirty blocks (`accepts_dirty`, or dirty
/// blocks held from the start), and holds none where it offers none; it offers
/// [`crate::Persistence`] exactly when [`TierInfo::persistent`]; a cleaning policy only with
/// cleaning.
pub fn roles_are_offered_as_info_says(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    let cl = s.tier.cleaning();
    if s.has_dirty() {
        assert!(
            cl.is_some(),
            "{name}: can hold dirty blocks, offers no cleaning"
        );
    }
    if cl.is_none() {
        assert_eq!(s.tier.stats().dirty_blocks, 0, "{name}: dirty, no cleaning");
        if s.takes_stores {
            let k = key(60, 0);
            let d = bytes(&k, V, 1, bs(&s));
            let a = s.tier.write_dirty(&k, V, Class::NORMAL, &d);
            assert_eq!(
                a.expect(TIER_FAILED),
                Admit::Rejected,
                "{name}: took a dirty block, offers no cleaning"
            );
            assert_eq!(s.tier.stats().dirty_blocks, 0, "{name}: dirty, no cleaning");
        }
    }
    assert_eq!(
        s.tier.persistence().is_some(),
        s.info().persistent,
        "{name}: persistence offered as `persistent` says"
    );
}
