//! The results table: one row per figure, beside the baseline measured in the same run.

/// One line of the results table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// The measurement.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// The baseline measured in the same run, if any.
    pub baseline: Option<f64>,
    /// The target, as text.
    pub target: String,
    /// Whether the target is met.
    pub met: Option<bool>,
}

impl Row {
    /// A row with no target (a figure reported, not judged).
    pub fn reported(name: String, value: f64, unit: &'static str, baseline: Option<f64>) -> Row {
        Row {
            name,
            value,
            unit,
            baseline,
            target: "-".into(),
            met: None,
        }
    }

    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b)
    }
}

/// Prints the table.
pub fn print(rows: &[Row]) {
    println!(
        "{:<52} {:>14} {:>14} {:>8}  {:<22} met",
        "benchmark", "value", "baseline", "ratio", "target"
    );
    for r in rows {
        let base = r.baseline.map_or("-".to_owned(), |b| format!("{b:.1}"));
        let ratio = r.ratio().map_or("-".to_owned(), |x| format!("{x:.2}x"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "{:<52} {:>10.1} {:<3} {:>14} {:>8}  {:<22} {met}",
            r.name, r.value, r.unit, base, ratio, r.target
        );
    }
}
