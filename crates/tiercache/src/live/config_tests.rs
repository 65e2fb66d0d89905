//! Tests of `config`: parsing, file:line errors, flags over the file.

use super::*;

#[test]
fn parses_known_keys() {
    let c = parse("memory = \"64M\"\npriority = [\"www/top\"]\nb_pmin = \"30%\"\nomega = 100\n")
        .unwrap();
    assert_eq!(c.memory.unwrap().bytes().unwrap(), 64 << 20);
    assert_eq!(c.priority, Some(vec![PathBuf::from("www/top")]));
    assert_eq!(c.b_pmin.unwrap().as_text(), "30%");
}

#[test]
fn unknown_key_names_its_line() {
    let (line, msg) = parse("memory = \"64M\"\n\ncolour = \"red\"\n").unwrap_err();
    assert_eq!(line, 3);
    assert!(msg.contains("colour"), "{msg}");
    let (line, _) = parse("memory = \"64M\"\nomega = \"many\"\n").unwrap_err();
    assert_eq!(line, 2);
    let (line, msg) = parse("[[tier]]\nkind = \"test\"\nsize = \"1M\"\nspeed = 3\n").unwrap_err();
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("speed"), "{msg}");
}

#[test]
fn flags_win_field_by_field() {
    let file = parse(
        "memory = \"64M\"\npolicy = \"arc\"\nthreads = 4\nio_workers = 3\ntransport = \"auto\"\n",
    )
    .unwrap();
    let flags = MountOptions {
        memory: Some(SizeValue::Text("8M".into())),
        threads: None,
        io_workers: Some(16),
        ..MountOptions::default()
    };
    let m = flags.over(file);
    assert_eq!(m.memory.unwrap().bytes().unwrap(), 8 << 20);
    assert_eq!(m.policy.as_deref(), Some("arc"));
    assert_eq!(m.threads, Some(4));
    assert_eq!(m.io_workers, Some(16));
    assert_eq!(m.transport.as_deref(), Some("auto"));
}

fn file(text: &str) -> ConfigFile {
    ConfigFile {
        path: Some(PathBuf::from("tc.toml")),
        text: text.to_string(),
        options: parse(text).unwrap(),
    }
}

/// The lower tiers of `text` with 4 KiB blocks, or the error.
fn lower(text: &str) -> Result<Vec<LowerTierSpec>, ConfigError> {
    let mut f = file(text);
    let mem = f.fold_memory_tier()?;
    let tiers = f.options.tiers.clone().unwrap_or_default();
    f.lower_tiers(&tiers, 4096, &mem)
}

#[test]
fn tiers_parse_with_defaults() {
    let text = "[[tier]]\nkind = \"memory\"\nsize = \"64M\"\npolicy = \"sieve\"\n\n\
                [[tier]]\nkind = \"test\"\nsize = \"1G\"\n\n\
                [[tier]]\nkind = \"test\"\nname = \"slow\"\nsize = 65536\npolicy = \"arc\"\n\
                placement = \"inclusive\"\nread_latency_us = 100\nwrite_latency_us = 200\n\
                accepts_dirty = true\n";
    let mut f = file(text);
    assert_eq!(f.fold_memory_tier().unwrap(), "memory");
    assert_eq!(
        f.options.memory.as_ref().unwrap().bytes().unwrap(),
        64 << 20
    );
    assert_eq!(f.options.policy.as_deref(), Some("sieve"));
    let tiers = f.options.tiers.clone().unwrap();
    let specs = f.lower_tiers(&tiers, 4096, "memory").unwrap();
    assert_eq!(
        specs,
        vec![
            LowerTierSpec {
                name: "test".into(),
                kind: LowerTierKind::Test,
                capacity_bytes: 1 << 30,
                policy: PolicyKind::Lru,
                placement: Placement::Exclusive,
                read_latency: Duration::ZERO,
                write_latency: Duration::ZERO,
                accepts_dirty: false,
                remote: None,
                flash: None,
            },
            LowerTierSpec {
                name: "slow".into(),
                kind: LowerTierKind::Test,
                capacity_bytes: 65536,
                policy: PolicyKind::Arc,
                placement: Placement::Inclusive,
                read_latency: Duration::from_micros(100),
                write_latency: Duration::from_micros(200),
                accepts_dirty: true,
                remote: None,
                flash: None,
            },
        ]
    );
}

#[test]
fn tier_errors_name_file_and_line() {
    let cases = [
        (
            "[[tier]]\nkind = \"ssd\"\nsize = \"1G\"\n",
            "tc.toml:2:",
            "unknown tier kind `ssd`",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1K\"\n",
            "tc.toml:3:",
            "less than one block",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1Q\"\n",
            "tc.toml:3:",
            "not a size",
        ),
        ("[[tier]]\nkind = \"test\"\n", "tc.toml:2:", "needs `size`"),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nplacement = \"pinned=x\"\n",
            "tc.toml:4:",
            "unknown placement",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nplacement = \"sideways\"\n",
            "tc.toml:4:",
            "unknown placement",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1M\"\npolicy = \"random\"\n",
            "tc.toml:4:",
            "policy",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1M\"\n[[tier]]\nkind = \"test\"\nsize = \"2M\"\n",
            "tc.toml:5:",
            "`test` is used twice",
        ),
        (
            "[[tier]]\nkind = \"test\"\nsize = \"1M\"\n[[tier]]\nkind = \"memory\"\n",
            "tc.toml:5:",
            "must be the first",
        ),
        (
            "memory = \"64M\"\n[[tier]]\nkind = \"memory\"\nsize = \"32M\"\n",
            "tc.toml:4:",
            "both given",
        ),
        (
            "policy = \"lru\"\n[[tier]]\nkind = \"memory\"\npolicy = \"arc\"\n",
            "tc.toml:4:",
            "both given",
        ),
        (
            "[[tier]]\nkind = \"memory\"\n\npolicy = \"random\"\n",
            "tc.toml:4:",
            "policy",
        ),
        (
            "[[tier]]\nkind = \"memory\"\nplacement = \"inclusive\"\n",
            "tc.toml:3:",
            "not the memory tier",
        ),
        (
            "[[tier]]\nkind = \"memory\"\nread_latency_us = 5\n",
            "tc.toml:3:",
            "only for kind = \"test\"",
        ),
        (
            "[[tier]]\nkind = \"memory\"\nname = \"fast\"\n[[tier]]\nkind = \"test\"\n\
             name = \"fast\"\nsize = \"1M\"\n",
            "tc.toml:6:",
            "`fast` is used twice",
        ),
    ];
    for (text, place, needle) in cases {
        let err = lower(text).unwrap_err().to_string();
        assert!(err.starts_with(place), "{text:?}: {err}");
        assert!(err.contains(needle), "{text:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// What a lower tier evicts cascades into an exclusive tier below it: exclusive is taken at
/// any level, from flags and from the file.
#[test]
fn exclusive_is_accepted_below_another_lower_tier() {
    let f = ConfigFile::default();
    let three = ["test:1M", "test:2M:exclusive", "test:4M:exclusive"]
        .map(|a| TierTable::from_flag(a).unwrap());
    let specs = f.lower_tiers(&three, 4096, "memory").unwrap();
    let placements: Vec<Placement> = specs.iter().map(|s| s.placement).collect();
    let excl = Placement::Exclusive;
    assert_eq!(placements, [excl, excl, excl]);
    let specs = lower(
        "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nplacement = \"inclusive\"\n[[tier]]\n\
         kind = \"test\"\nname = \"deep\"\nsize = \"4M\"\nplacement = \"exclusive\"\n",
    )
    .unwrap();
    let placements: Vec<Placement> = specs.iter().map(|s| s.placement).collect();
    assert_eq!(placements, [Placement::Inclusive, excl]);
}

#[test]
fn tier_flags_parse_and_name_themselves() {
    let f = ConfigFile::default();
    let flags: Vec<TierTable> = ["test:64M:exclusive", "test:1G", "test:8M:inclusive"]
        .iter()
        .map(|a| TierTable::from_flag(a).unwrap())
        .collect();
    let specs = f.lower_tiers(&flags, 4096, "memory").unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["test", "test2", "test3"]);
    assert_eq!(specs[0].capacity_bytes, 64 << 20);
    // Below the first lower tier the default is inclusive (exclusive is asked for by name).
    assert_eq!(specs[1].placement, Placement::Inclusive);
    assert_eq!(specs[2].placement, Placement::Inclusive);
    for (arg, needle) in [
        ("test", "expected KIND:SIZE[:PLACEMENT]"),
        ("test:1M:exclusive:x", "expected KIND:SIZE[:PLACEMENT]"),
    ] {
        let err = TierTable::from_flag(arg).unwrap_err().to_string();
        assert!(err.starts_with(&format!("--tier {arg}: ")), "{err}");
        assert!(err.contains(needle), "{err}");
    }
    for (arg, needle) in [
        ("ssd:1G", "unknown tier kind `ssd`"),
        ("memory:1G", "--memory"),
        ("test:100", "less than one block"),
        ("test:1M:pinned=-1", "unknown placement"),
    ] {
        let t = TierTable::from_flag(arg).unwrap();
        let err = f.lower_tiers(&[t], 4096, "memory").unwrap_err().to_string();
        assert!(err.starts_with(&format!("--tier {arg}: ")), "{err}");
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn kernel_cache_takes_a_mode_or_a_boolean() {
    use tiercache_fuse::KernelCacheMode;
    let mode = |text: &str| {
        parse(text)
            .unwrap()
            .kernel_cache
            .unwrap()
            .mode()
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        mode("kernel_cache = \"priority\"\n"),
        Ok(KernelCacheMode::Priority)
    );
    assert_eq!(mode("kernel_cache = \"off\"\n"), Ok(KernelCacheMode::Off));
    assert_eq!(mode("kernel_cache = true\n"), Ok(KernelCacheMode::All));
    assert_eq!(mode("kernel_cache = false\n"), Ok(KernelCacheMode::Off));
    let bad = mode("kernel_cache = \"sometimes\"\n").unwrap_err();
    assert!(bad.contains("priority, all or off"), "{bad}");
}
