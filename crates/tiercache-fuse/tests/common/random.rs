//! The seeded random operation sequence shared by the pass-through test
//! (`tests/random_ops.rs`) and the cached-mount test of the `tiercache` crate
//! (`crates/tiercache/tests/posix_on_cache.rs`): the same operations run on a
//! mounted directory and on a shadow plain directory, compared byte for byte,
//! while a concurrent reader checks a file that is appended to as it reads. The operations
//! mix pread/pwrite, truncates, appends, renames over open files, fsyncs, reopens and stores
//! through shared mappings (fsx-style).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const FILES: usize = 4;
const OPS: usize = 2000;
const MAX_OFF: u64 = 300_000;

/// Name of the append-only file the concurrent reader checks (mount only).
pub const PATTERN: &str = "pattern";

/// xorshift64*: deterministic and dependency free.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Between 1 and `max` random bytes.
    pub fn bytes(&mut self, max: u64) -> Vec<u8> {
        let n = 1 + self.below(max);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The same logical file in both trees.
struct Pair {
    name: String,
    mnt: File,
    plain: File,
}

fn open_rw(dir: &Path, name: &str) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(name))
        .unwrap()
}

/// Byte expected at `offset` of the pattern file.
pub fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(7).wrapping_add(offset >> 9) % 251) as u8
}

pub fn pattern_chunk(start: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(start + i)).collect()
}

fn read_all(f: &File) -> Vec<u8> {
    let len = f.metadata().unwrap().len();
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    buf
}

/// Through a shared mapping of the mounted file: checks a random range against the shadow
/// file, stores random bytes there (the shadow gets them by `pwrite`), and syncs the mapping
/// half the time (else the kernel writes it back when it likes: reads through other handles
/// must see the bytes either way).
fn mmap_step(p: &Pair, rng: &mut Rng, step: usize) {
    use std::os::fd::AsRawFd;
    let size = p.mnt.metadata().unwrap().len();
    if size == 0 {
        return;
    }
    let off = rng.below(size);
    let len = (1 + rng.below(4000)).min(size - off) as usize;
    let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let sync = rng.below(2) == 0;
    let map_len = usize::try_from(size).unwrap();
    // SAFETY: a fresh shared mapping of an open descriptor, of the file's current size; only
    // this thread touches it and it is unmapped below. The file does not shrink meanwhile
    // (one thread runs this file's operations).
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            p.mnt.as_raw_fd(),
            0,
        );
        assert_ne!(
            m,
            libc::MAP_FAILED,
            "step {step}: mmap: {}",
            std::io::Error::last_os_error()
        );
        let bytes = std::slice::from_raw_parts_mut(m.cast::<u8>(), map_len);
        let mut want = vec![0u8; len];
        p.plain.read_exact_at(&mut want, off).unwrap();
        let off = off as usize;
        assert!(
            bytes[off..off + len] == want[..],
            "step {step}: mapped bytes differ on {}",
            p.name
        );
        bytes[off..off + len].copy_from_slice(&data);
        if sync {
            assert_eq!(
                libc::msync(m, map_len, libc::MS_SYNC),
                0,
                "step {step}: msync"
            );
        }
        assert_eq!(libc::munmap(m, map_len), 0);
    }
    p.plain.write_all_at(&data, off).unwrap();
}

/// What a run left behind, for checks of the backing directory.
pub struct Outcome {
    /// Names of the files that exist in both trees at the end.
    pub names: Vec<String>,
    /// Length of [`PATTERN`] in the mounted tree.
    pub pattern_len: u64,
}

impl Outcome {
    /// Asserts that `dir` (e.g. the backing directory once everything is
    /// written back) holds exactly what the shadow directory `plain` holds,
    /// plus the pattern file.
    pub fn check_tree(&self, what: &str, dir: &Path, plain: &Path) {
        for name in &self.names {
            let a = std::fs::read(dir.join(name)).unwrap();
            let b = std::fs::read(plain.join(name)).unwrap();
            assert_eq!(a.len(), b.len(), "{what}: size differs on {name}");
            assert!(a == b, "{what}: content differs on {name}");
        }
        assert!(
            std::fs::read(dir.join(PATTERN)).unwrap()
                == pattern_chunk(0, self.pattern_len as usize),
            "{what}: pattern file differs"
        );
        let mut names_d = names_in(dir);
        names_d.retain(|n| n != PATTERN);
        assert_eq!(names_d, names_in(plain), "{what}: names differ");
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Runs the sequence of seed `seed` on `mnt` and on `plain` (both empty),
/// checking reads as it goes, and compares both trees at the end.
pub fn run(mnt: &Path, plain: &Path, seed: u64) -> Outcome {
    let mut rng = Rng(seed);
    let mut files: Vec<Pair> = (0..FILES)
        .map(|i| {
            let name = format!("f{i}");
            Pair {
                mnt: open_rw(mnt, &name),
                plain: open_rw(plain, &name),
                name,
            }
        })
        .collect();

    // concurrent reader of an append-only pattern file
    let pat_path = mnt.join(PATTERN);
    let mut pat_writer = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&pat_path)
        .unwrap();
    let mut pat_len = 0u64;
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = Arc::clone(&done);
        let path = pat_path.clone();
        std::thread::spawn(move || {
            let f = File::open(&path).unwrap();
            let mut rng = Rng(seed ^ 0xdead_beef);
            let (mut reads, mut last_size) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) || reads < 50 {
                let size = f.metadata().unwrap().len();
                assert!(size >= last_size, "file shrank: {size} < {last_size}");
                last_size = size;
                let off = rng.below(size + 1000);
                let mut buf = vec![0u8; 1 + rng.below(20_000) as usize];
                let n = f.read_at(&mut buf, off).unwrap();
                for (i, b) in buf[..n].iter().enumerate() {
                    assert_eq!(
                        *b,
                        pattern(off + i as u64),
                        "pattern mismatch at {}",
                        off + i as u64
                    );
                }
                reads += 1;
            }
            reads
        })
    };

    let mut counter = 0usize;
    for step in 0..OPS {
        let i = rng.below(FILES as u64) as usize;
        match rng.below(100) {
            0..=29 => {
                let off = rng.below(MAX_OFF);
                let data = rng.bytes(40_000);
                files[i].mnt.write_all_at(&data, off).unwrap();
                files[i].plain.write_all_at(&data, off).unwrap();
            }
            30..=49 => {
                let off = rng.below(MAX_OFF + 50_000);
                let len = 1 + rng.below(60_000) as usize;
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                let na = files[i].mnt.read_at(&mut a, off).unwrap();
                let nb = files[i].plain.read_at(&mut b, off).unwrap();
                assert_eq!(
                    na, nb,
                    "step {step}: short read differs on {}",
                    files[i].name
                );
                assert!(
                    a[..na] == b[..nb],
                    "step {step}: data differs on {}",
                    files[i].name
                );
            }
            50..=57 => {
                let size = rng.below(MAX_OFF);
                files[i].mnt.set_len(size).unwrap();
                files[i].plain.set_len(size).unwrap();
            }
            58..=63 => {
                // truncate(2) by path, no handle
                let size = rng.below(MAX_OFF);
                let name = files[i].name.clone();
                for dir in [mnt, plain] {
                    OpenOptions::new()
                        .write(true)
                        .open(dir.join(&name))
                        .unwrap()
                        .set_len(size)
                        .unwrap();
                }
            }
            64..=71 => {
                let data = rng.bytes(10_000);
                let name = files[i].name.clone();
                for dir in [mnt, plain] {
                    let mut f = OpenOptions::new()
                        .append(true)
                        .open(dir.join(&name))
                        .unwrap();
                    f.write_all(&data).unwrap();
                }
            }
            72..=77 => {
                counter += 1;
                let new = format!("r{counter}");
                for dir in [mnt, plain] {
                    std::fs::rename(dir.join(&files[i].name), dir.join(&new)).unwrap();
                }
                files[i].name = new;
            }
            78..=81 => {
                // rename j over i: i's object is unlinked but its handles
                // stay usable; j's object takes i's name; j's name is reused
                let j = (i + 1) % FILES;
                let (name_i, name_j) = (files[i].name.clone(), files[j].name.clone());
                for dir in [mnt, plain] {
                    std::fs::rename(dir.join(&name_j), dir.join(&name_i)).unwrap();
                }
                let fresh = Pair {
                    mnt: open_rw(mnt, &name_j),
                    plain: open_rw(plain, &name_j),
                    name: name_j,
                };
                let obj_j = std::mem::replace(&mut files[j], fresh);
                let moved = Pair {
                    name: name_i,
                    mnt: obj_j.mnt,
                    plain: obj_j.plain,
                };
                let old_i = std::mem::replace(&mut files[i], moved);
                assert!(
                    read_all(&old_i.mnt) == read_all(&old_i.plain),
                    "step {step}: unlinked file differs"
                );
                old_i.mnt.write_all_at(b"late write", 3).unwrap();
            }
            82..=85 => {
                if rng.below(2) == 0 {
                    files[i].mnt.sync_all().unwrap();
                } else {
                    files[i].mnt.sync_data().unwrap();
                }
            }
            86..=91 => {
                let name = files[i].name.clone();
                files[i].mnt = open_rw(mnt, &name);
                files[i].plain = open_rw(plain, &name);
            }
            92..=95 => {
                let chunk = pattern_chunk(pat_len, 1 + rng.below(30_000) as usize);
                pat_writer.write_all(&chunk).unwrap();
                pat_len += chunk.len() as u64;
            }
            96..=97 => mmap_step(&files[i], &mut rng, step),
            _ => {
                let a = read_all(&files[i].mnt);
                let b = read_all(&files[i].plain);
                assert_eq!(a.len(), b.len(), "step {step}: size differs");
                assert!(a == b, "step {step}: content differs on {}", files[i].name);
                let (ma, mb) = (
                    std::fs::metadata(mnt.join(&files[i].name)).unwrap(),
                    std::fs::metadata(plain.join(&files[i].name)).unwrap(),
                );
                assert_eq!(ma.len(), mb.len(), "step {step}: stat size differs");
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads >= 50);
    let outcome = Outcome {
        names: files.iter().map(|p| p.name.clone()).collect(),
        pattern_len: pat_len,
    };
    // final byte-for-byte comparison of every file, by name
    outcome.check_tree("mount vs plain", mnt, plain);
    outcome
}
