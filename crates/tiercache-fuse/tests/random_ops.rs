//! (b) Seeded random operation sequence executed on the mount and on a shadow
//! plain directory, compared byte for byte, with a concurrent reader thread
//! checking a file that is appended to while it reads.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::TestMount;
use tiercache_fuse::MountOptions;

const FILES: usize = 4;
const OPS: usize = 2000;
const MAX_OFF: u64 = 300_000;

/// xorshift64*: deterministic and dependency free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Between 1 and `max` random bytes.
    fn bytes(&mut self, max: u64) -> Vec<u8> {
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
fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(7).wrapping_add(offset >> 9) % 251) as u8
}

fn pattern_chunk(start: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(start + i)).collect()
}

fn read_all(f: &File) -> Vec<u8> {
    let len = f.metadata().unwrap().len();
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    buf
}

fn random_ops(opts: MountOptions, seed: u64) {
    let m = TestMount::new(opts);
    let (mnt, plain): (PathBuf, PathBuf) = (m.mnt.clone(), m.plain.clone());
    let mut rng = Rng(seed);
    let mut files: Vec<Pair> = (0..FILES)
        .map(|i| {
            let name = format!("f{i}");
            Pair {
                mnt: open_rw(&mnt, &name),
                plain: open_rw(&plain, &name),
                name,
            }
        })
        .collect();

    // concurrent reader of an append-only pattern file
    let pat_path = mnt.join("pattern");
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
                for dir in [&mnt, &plain] {
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
                for dir in [&mnt, &plain] {
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
                for dir in [&mnt, &plain] {
                    std::fs::rename(dir.join(&files[i].name), dir.join(&new)).unwrap();
                }
                files[i].name = new;
            }
            78..=81 => {
                // rename j over i: i's object is unlinked but its handles
                // stay usable; j's object takes i's name; j's name is reused
                let j = (i + 1) % FILES;
                let (name_i, name_j) = (files[i].name.clone(), files[j].name.clone());
                for dir in [&mnt, &plain] {
                    std::fs::rename(dir.join(&name_j), dir.join(&name_i)).unwrap();
                }
                let fresh = Pair {
                    mnt: open_rw(&mnt, &name_j),
                    plain: open_rw(&plain, &name_j),
                    name: name_j,
                };
                let obj_j = std::mem::replace(&mut files[j], fresh);
                let moved = Pair {
                    name: name_i,
                    mnt: obj_j.mnt,
                    plain: obj_j.plain,
                };
                let old_i = std::mem::replace(&mut files[i], moved);
                assert!(read_all(&old_i.mnt) == read_all(&old_i.plain));
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
                files[i].mnt = open_rw(&mnt, &name);
                files[i].plain = open_rw(&plain, &name);
            }
            92..=95 => {
                let chunk = pattern_chunk(pat_len, 1 + rng.below(30_000) as usize);
                pat_writer.write_all(&chunk).unwrap();
                pat_len += chunk.len() as u64;
            }
            _ => {
                let a = read_all(&files[i].mnt);
                let b = read_all(&files[i].plain);
                assert_eq!(a.len(), b.len(), "step {step}: size differs");
                assert!(a == b, "step {step}: content differs on {}", files[i].name);
                let (ma, mb) = (
                    std::fs::metadata(mnt.join(&files[i].name)).unwrap(),
                    std::fs::metadata(plain.join(&files[i].name)).unwrap(),
                );
                assert_eq!(ma.len(), mb.len());
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads >= 50);
    // final byte-for-byte comparison of every file, by name, and of the backing
    for p in &files {
        let a = std::fs::read(mnt.join(&p.name)).unwrap();
        let b = std::fs::read(plain.join(&p.name)).unwrap();
        let c = std::fs::read(m.backing.join(&p.name)).unwrap();
        assert!(a == b && a == c, "final content differs on {}", p.name);
    }
    assert_eq!(
        std::fs::read(&pat_path).unwrap(),
        pattern_chunk(0, pat_len as usize)
    );
    let mut names_m: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut names_p: Vec<_> = std::fs::read_dir(&plain)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names_m.retain(|n| n != "pattern");
    names_m.sort();
    names_p.sort();
    assert_eq!(names_m, names_p);
}

#[test]
fn random_ops_direct_io() {
    random_ops(MountOptions::default(), 0x1234_5678_9abc_def1);
}

#[test]
fn random_ops_kernel_cache() {
    let mut opts = MountOptions::default();
    opts.kernel_cache = true;
    random_ops(opts, 0x0fed_cba9_8765_4321);
}
