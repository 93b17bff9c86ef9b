//! Reading frames back. Input is untrusted (a file may be cut, damaged or crafted): every
//! length is checked against [`MAX_PAYLOAD`] and the bytes left in the file before anything
//! is allocated, every frame's CRC is verified, and nothing panics. Reading stops at the first
//! bad frame and says where and why; what came before stays usable.

use std::{
    fs::File,
    io::{self, BufRead as _, BufReader, Read},
    path::{Path, PathBuf},
};

use super::format::{checksum, FRAME_HEAD, FRAME_TAIL, MAGIC, MAX_PAYLOAD, PREAMBLE_LEN, VERSION};

/// Why a file is not a recording at all (the reader returns nothing from it).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file could not be opened or read.
    #[error("cannot open the recording {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file does not begin with the recording preamble (or is shorter than it).
    #[error("{} is not a gputrace recording (no GPUTRACE preamble)", .path.display())]
    NotARecording {
        /// The file.
        path: PathBuf,
    },
    /// The preamble gives a newer format version than this reader knows.
    #[error("{} is a version {found} recording; this gputrace reads version {VERSION} and older — use a newer gputrace", .path.display())]
    TooNew {
        /// The file.
        path: PathBuf,
        /// The version its preamble gives.
        found: u32,
    },
    /// The preamble gives version 0, which no gputrace writes: the preamble is damaged.
    #[error("{} has a damaged preamble (format version 0, which no gputrace writes): it cannot be read", .path.display())]
    DamagedPreamble {
        /// The file.
        path: PathBuf,
    },
}

/// Where and why reading stopped early. The frames before `offset` were good.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    /// The file ends inside a frame, or a frame claims more bytes than the file has left.
    #[error("the file ends inside a frame at byte {offset} (cut short: the recorder was killed or the disk filled)")]
    Truncated {
        /// Byte offset in the file of the frame's start.
        offset: u64,
    },
    /// A frame claims a payload larger than [`MAX_PAYLOAD`].
    #[error("frame at byte {offset} claims {len} bytes, more than {limit} (damaged)")]
    Oversize {
        /// Byte offset in the file of the frame's start.
        offset: u64,
        /// The payload length the frame claims, in bytes.
        len: u64,
        /// The largest payload allowed, in bytes ([`MAX_PAYLOAD`]).
        limit: u64,
    },
    /// A frame's CRC-32 does not match its kind and payload.
    #[error("frame at byte {offset} fails its checksum (damaged)")]
    Checksum {
        /// Byte offset in the file of the frame's start.
        offset: u64,
    },
    /// A frame's reserved half-word after its kind is not zero.
    #[error("frame at byte {offset} has a non-zero reserved field (damaged)")]
    Reserved {
        /// Byte offset in the file of the frame's start.
        offset: u64,
    },
    /// A frame's checksum holds but its payload does not make sense: bad JSON, a wrong length,
    /// or a record no recorder writes there (found by the replay, not the reader).
    #[error("frame of kind {kind} at byte {offset} does not parse: {why} (damaged)")]
    Payload {
        /// Byte offset in the file of the frame's start.
        offset: u64,
        /// The frame's kind (`format::kind`).
        kind: u16,
        /// What is wrong with it, for the message.
        why: String,
    },
    /// Reading the file failed.
    #[error("reading byte {offset}: {why}")]
    Io {
        /// Byte offset in the file of the frame being read.
        offset: u64,
        /// The I/O error, as a message.
        why: String,
    },
}

/// One good frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordFrame {
    /// Byte offset in the file of the frame's start (its length field).
    pub offset: u64,
    /// The frame's kind (`format::kind`).
    pub kind: u16,
    /// The payload, its checksum verified.
    pub payload: Vec<u8>,
}

/// Reads a recording's frames one by one, checking each, and stops at the first bad one.
#[derive(Debug)]
pub struct Reader<R> {
    input: R,
    offset: u64,
    /// Bytes the input holds after `offset`, where known: a claimed length beyond it is
    /// damage, found without allocating for it.
    remaining: Option<u64>,
    stopped: bool,
    /// The format version the preamble gives (1..=[`VERSION`]).
    version: u32,
}

/// The first bytes of a zstd frame (RFC 8878).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// A recording file's bytes: as `record` wrote them, or compressed with zstd (`zstd -19
/// FILE`; the accuracy corpus keeps its recordings so). Decompression streams: no more than
/// zstd's window (at most 128 MiB, its default limit) and one frame are held at a time.
pub enum Input {
    /// The file as written.
    Plain(BufReader<File>),
    /// A zstd-compressed file, decompressed as it is read.
    Zstd(Box<zstd::stream::read::Decoder<'static, BufReader<File>>>),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Plain(_) => "Input::Plain",
            Self::Zstd(_) => "Input::Zstd",
        })
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(r) => r.read(buf),
            Self::Zstd(r) => r.read(buf),
        }
    }
}

impl Reader<Input> {
    /// Open a recording file, compressed or not, and check its preamble.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let io_err = |source| OpenError::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let mut file = BufReader::new(file);
        let compressed = file.fill_buf().map_err(io_err)?.starts_with(&ZSTD_MAGIC);
        // A compressed file's length says nothing of the frames': cut frames are found by
        // reading past the end instead.
        let (input, len) = if compressed {
            (Input::Zstd(Box::new(zstd::stream::read::Decoder::with_buffer(file).map_err(io_err)?)), None)
        } else {
            (Input::Plain(file), Some(len))
        };
        Self::new(input, len).map_err(|e| match e {
            PreambleError::Io(source) => OpenError::Io { path: path.to_owned(), source },
            PreambleError::NotARecording => OpenError::NotARecording { path: path.to_owned() },
            PreambleError::TooNew(found) => OpenError::TooNew { path: path.to_owned(), found },
            PreambleError::DamagedVersion => OpenError::DamagedPreamble { path: path.to_owned() },
        })
    }
}

/// Why an input's preamble was refused ([`OpenError`] without the path).
#[derive(Debug)]
pub enum PreambleError {
    /// Reading the preamble failed.
    Io(io::Error),
    /// The input does not begin with the recording preamble (or is shorter than it).
    NotARecording,
    /// The preamble gives a newer format version than this reader knows.
    TooNew(u32),
    /// The preamble gives version 0 (versions start at 1): damaged.
    DamagedVersion,
}

impl<R: Read> Reader<R> {
    /// A reader over `input`, of `len` bytes in all where known.
    pub fn new(mut input: R, len: Option<u64>) -> Result<Self, PreambleError> {
        let mut pre = [0u8; PREAMBLE_LEN];
        match read_full(&mut input, &mut pre) {
            Ok(true) => {}
            Ok(false) => return Err(PreambleError::NotARecording),
            Err(e) => return Err(PreambleError::Io(e)),
        }
        if &pre[..8] != MAGIC {
            return Err(PreambleError::NotARecording);
        }
        let version = u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]);
        if version == 0 {
            return Err(PreambleError::DamagedVersion);
        }
        if version > VERSION {
            return Err(PreambleError::TooNew(version));
        }
        Ok(Self { input, offset: PREAMBLE_LEN as u64, remaining: len.map(|l| l.saturating_sub(PREAMBLE_LEN as u64)), stopped: false, version })
    }

    /// The format version the file's preamble gives: older than [`VERSION`], the file lacks
    /// what was added to the format since (docs/recording.md, "Format versions").
    #[must_use]
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// The next frame; `None` at a clean end of file; `Some(Err)` once, where reading stopped.
    pub fn next_frame(&mut self) -> Option<Result<RecordFrame, Damage>> {
        if self.stopped {
            return None;
        }
        let r = self.read_frame();
        if !matches!(r, Some(Ok(_))) {
            self.stopped = true;
        }
        r
    }

    fn read_frame(&mut self) -> Option<Result<RecordFrame, Damage>> {
        let offset = self.offset;
        let mut head = [0u8; FRAME_HEAD];
        match read_some(&mut self.input, &mut head) {
            Ok(0) => return None,
            Ok(n) if n < FRAME_HEAD => return Some(Err(Damage::Truncated { offset })),
            Ok(_) => {}
            Err(e) => return Some(Err(io_damage(offset, &e))),
        }
        let len = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
        let kind = u16::from_le_bytes([head[4], head[5]]);
        if head[6] != 0 || head[7] != 0 {
            return Some(Err(Damage::Reserved { offset }));
        }
        if len > MAX_PAYLOAD as u64 {
            return Some(Err(Damage::Oversize { offset, len, limit: MAX_PAYLOAD as u64 }));
        }
        let frame_len = FRAME_HEAD as u64 + len + FRAME_TAIL as u64;
        if self.remaining.is_some_and(|left| frame_len > left) {
            return Some(Err(Damage::Truncated { offset }));
        }
        // Within MAX_PAYLOAD (16 MiB), so the allocation is bounded even for a crafted file.
        let mut body = vec![0u8; len as usize + FRAME_TAIL];
        match read_full(&mut self.input, &mut body) {
            Ok(true) => {}
            Ok(false) => return Some(Err(Damage::Truncated { offset })),
            Err(e) => return Some(Err(io_damage(offset, &e))),
        }
        let crc_at = len as usize;
        let stored = u32::from_le_bytes([body[crc_at], body[crc_at + 1], body[crc_at + 2], body[crc_at + 3]]);
        body.truncate(crc_at);
        let mut covered = Vec::with_capacity(4 + body.len());
        covered.extend_from_slice(&head[4..8]);
        covered.extend_from_slice(&body);
        if checksum(&covered) != stored {
            return Some(Err(Damage::Checksum { offset }));
        }
        self.offset += frame_len;
        if let Some(left) = self.remaining.as_mut() {
            *left -= frame_len;
        }
        Some(Ok(RecordFrame { offset, kind, payload: body }))
    }
}

/// A read error as damage. A compressed file cut short ends its stream inside a zstd block,
/// which the decoder says as `UnexpectedEof` ("incomplete frame"): that is a cut, as a plain
/// file ending inside a frame is (a plain file's reads never say it).
fn io_damage(offset: u64, e: &io::Error) -> Damage {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        Damage::Truncated { offset }
    } else {
        Damage::Io { offset, why: e.to_string() }
    }
}

/// Fill `buf`; `Ok(false)` if the input ended first.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    Ok(read_some(input, buf)? == buf.len())
}

/// Read until `buf` is full or the input ends; how many bytes were read.
fn read_some(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::{
        super::format::{frame, kind, preamble},
        *,
    };

    fn file(frames: &[(u16, &[u8])]) -> Vec<u8> {
        let mut out = preamble().to_vec();
        for (k, p) in frames {
            out.extend(frame(*k, p));
        }
        out
    }

    /// Every frame a reader gives, and where it stopped early.
    fn drain<R: Read>(mut r: Reader<R>) -> (Vec<RecordFrame>, Option<Damage>) {
        let mut frames = Vec::new();
        while let Some(f) = r.next_frame() {
            match f {
                Ok(f) => frames.push(f),
                Err(d) => return (frames, Some(d)),
            }
        }
        (frames, None)
    }

    fn read_all(bytes: &[u8]) -> (Vec<RecordFrame>, Option<Damage>) {
        drain(Reader::new(bytes, Some(bytes.len() as u64)).expect("preamble"))
    }

    #[test]
    fn frames_round_trip() {
        let bytes = file(&[(kind::START, b"{}"), (kind::EVENT, &[1, 2, 3]), (kind::END, b"")]);
        let (frames, damage) = read_all(&bytes);
        assert_eq!(damage, None);
        assert_eq!(frames.iter().map(|f| (f.kind, f.payload.clone())).collect::<Vec<_>>(), vec![
            (kind::START, b"{}".to_vec()),
            (kind::EVENT, vec![1, 2, 3]),
            (kind::END, vec![])
        ]);
    }

    #[test]
    fn every_cut_keeps_the_whole_frames_before_it() {
        let bytes = file(&[(kind::START, b"{}"), (kind::EVENT, &[9; 40]), (kind::EVENT, &[7; 10])]);
        let second = PREAMBLE_LEN + FRAME_HEAD + 2 + FRAME_TAIL;
        let third = second + FRAME_HEAD + 40 + FRAME_TAIL;
        for cut in PREAMBLE_LEN..bytes.len() {
            let (frames, damage) = read_all(&bytes[..cut]);
            let whole = usize::from(cut >= second) + usize::from(cut >= third);
            assert_eq!(frames.len(), whole, "cut at {cut}");
            let at_boundary = cut == PREAMBLE_LEN || cut == second || cut == third;
            assert_eq!(damage.is_none(), at_boundary, "cut at {cut}: {damage:?}");
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_is_caught() {
        let bytes = file(&[(kind::START, b"{\"a\":1}"), (kind::EVENT, &[5; 24])]);
        for i in PREAMBLE_LEN..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(read_all(&bad).1.is_some(), "byte {i} bit {bit} went unnoticed");
            }
        }
    }

    #[test]
    fn crafted_lengths_allocate_nothing() {
        let mut bytes = preamble().to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&[2, 0, 0, 0]);
        assert!(matches!(read_all(&bytes).1, Some(Damage::Oversize { .. })));
        let mut bytes = preamble().to_vec();
        bytes.extend_from_slice(&(1u32 << 20).to_le_bytes());
        bytes.extend_from_slice(&[2, 0, 0, 0]);
        assert!(matches!(read_all(&bytes).1, Some(Damage::Truncated { .. })), "a length past the end is a cut, found before reading");
    }

    /// Every frame of a file at `path`, read through `Reader::open`.
    fn open_all(path: &Path) -> (Vec<RecordFrame>, Option<Damage>) {
        drain(Reader::open(path).expect("opens"))
    }

    #[test]
    fn a_compressed_recording_reads_as_the_plain_one_and_its_cut_is_found() {
        let dir = crate::test_support::scratch("reader", "zstd");
        // Larger than zstd's 128 KiB blocks, so that a cut leaves whole blocks before it.
        let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let bytes = file(&[(kind::START, b"{}"), (kind::EVENT, &big), (kind::EVENT, &big), (kind::END, b"")]);
        let (plain, packed) = (dir.join("a.gtr"), dir.join("a.gtr.zst"));
        std::fs::write(&plain, &bytes).expect("write");
        let compressed = zstd::encode_all(&bytes[..], 19).expect("compress");
        assert!(compressed.len() < bytes.len() / 4, "the test's file compresses");
        std::fs::write(&packed, &compressed).expect("write");
        assert_eq!(open_all(&packed), open_all(&plain));
        assert_eq!(open_all(&packed).0.len(), 4);
        // Cut inside the compressed stream: the frames before the cut, then where it stopped.
        std::fs::write(&packed, &compressed[..compressed.len() - 8]).expect("write");
        let (frames, damage) = open_all(&packed);
        assert!(frames.len() < 4 && matches!(damage, Some(Damage::Truncated { .. })), "a cut, as of a plain file: {} frames, {damage:?}", frames.len());
        // Not a recording inside: said as of the plain file.
        std::fs::write(&packed, zstd::encode_all(&b"hello, not a recording"[..], 3).expect("compress")).expect("write");
        assert!(matches!(Reader::open(&packed), Err(OpenError::NotARecording { .. })));
    }

    #[test]
    fn not_a_recording_and_newer_versions_are_refused() {
        assert!(matches!(Reader::new(&b"hello"[..], None), Err(PreambleError::NotARecording)));
        assert!(matches!(Reader::new(&b"NOTATRACE\0\0\0\0\0\0\0"[..], None), Err(PreambleError::NotARecording)));
        let mut newer = preamble();
        newer[8] = 9;
        assert!(matches!(Reader::new(&newer[..], None), Err(PreambleError::TooNew(9))));
        // Version 0 is no version: a damaged preamble, not a newer recording.
        let mut zero = preamble();
        zero[8] = 0;
        assert!(matches!(Reader::new(&zero[..], None), Err(PreambleError::DamagedVersion)));
    }
}
