//! Kernel symbols from `/proc/kallsyms`, to name the frames of the wakers' kernel stacks
//! (a timer interrupt, a disk completion, a pipe write). Only root sees real addresses
//! (`kptr_restrict`); without them every frame stays unnamed and wakeups are told apart by
//! who woke the thread alone.

/// Function symbols sorted by address.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    symbols: Vec<(u64, String)>,
}

impl KernelSymbols {
    /// Read `/proc/kallsyms`; empty where it shows no addresses.
    #[must_use]
    pub fn load() -> Self {
        crate::discover::procfs::read_text("/proc/kallsyms").map(|t| Self::parse(&t)).unwrap_or_default()
    }

    /// Parse the kallsyms text: `ADDRESS TYPE NAME [MODULE]`; text symbols (`t`, `T`) only.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut f = line.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let kind = f.next()?;
                let name = f.next()?;
                (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, name.to_owned()))
            })
            .collect();
        symbols.sort_unstable_by_key(|(a, _)| *a);
        Self { symbols }
    }

    /// Whether no symbol was read (no `/proc/kallsyms`, or addresses hidden from this user).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The function containing `addr` (the nearest symbol at or below it).
    #[must_use]
    pub fn name(&self, addr: u64) -> Option<&str> {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        self.symbols.get(i.checked_sub(1)?).map(|(_, n)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_function_an_address_falls_in() {
        let k = KernelSymbols::parse(
            "ffffffff81000000 T _stext\nffffffff81100000 t hrtimer_wakeup\nffffffff81100100 T try_to_wake_up\n\
             ffffffff82000000 D some_data\n0000000000000000 T hidden\nffffffffc0000000 t nv_isr\t[nvidia]\ngarbage\n",
        );
        assert_eq!(k.name(0xffff_ffff_8110_0010), Some("hrtimer_wakeup"));
        assert_eq!(k.name(0xffff_ffff_8110_0100), Some("try_to_wake_up"));
        assert_eq!(k.name(0xffff_ffff_c000_0004), Some("nv_isr"));
        assert_eq!(k.name(0x10), None, "below every symbol");
        assert!(KernelSymbols::parse("0000000000000000 T hidden\n").is_empty(), "kptr_restrict hides addresses");
    }
}
