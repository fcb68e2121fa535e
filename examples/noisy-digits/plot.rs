//! The example's SVG charts: test accuracy and SAM's sharpness per epoch (one line per method),
//! and final test accuracy against time per epoch (one point per method, the cost/accuracy
//! trade-off).

use std::fmt::Write;

/// One color per method, for up to 16 (the example's family and schedules together).
const COLORS: [&str; 16] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ff9896", "#98df8a", "#c5b0d5", "#ffbb78", "#393b79",
];

/// A chart's frame: title, grid, axes and legend; maps data to pixels.
struct Frame {
    out: String,
    x_range: (f64, f64),
    y_range: (f64, f64),
    legend_rows: usize,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PLOT_H: f64 = HEIGHT - TOP - BOTTOM;

impl Frame {
    /// `y_label` over `y_range` (grid lines every `y_step`) against `x_range`, with `x_ticks`.
    fn new(
        title: &str,
        (x_label, x_range, x_ticks): (&str, (f64, f64), &[(f64, String)]),
        (y_label, y_range, y_step): (&str, (f64, f64), f64),
    ) -> Self {
        let mut frame = Self {
            out: String::new(),
            x_range,
            y_range,
            legend_rows: 0,
        };
        let out = &mut frame.out;
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="24" font-size="14">{title}</text>"#
        );
        let mut level = (y_range.0 / y_step).ceil() * y_step;
        while level <= y_range.1 + 1e-9 {
            let y = frame.y(level);
            let _ = writeln!(
                frame.out,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{level:.2}</text>"##,
                LEFT + PLOT_W,
                LEFT - 6.0,
                y + 4.0,
            );
            level += y_step;
        }
        for (value, label) in x_ticks {
            let _ = writeln!(
                frame.out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                frame.x(*value),
                TOP + PLOT_H + 18.0
            );
        }
        let _ = writeln!(
            frame.out,
            r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{y_label}</text>"#,
            LEFT + PLOT_W / 2.0,
            HEIGHT - 10.0,
            TOP + PLOT_H / 2.0,
            TOP + PLOT_H / 2.0
        );
        frame
    }

    fn x(&self, value: f64) -> f64 {
        let (low, high) = self.x_range;
        LEFT + PLOT_W * (value - low) / (high - low)
    }

    fn y(&self, value: f64) -> f64 {
        let (low, high) = self.y_range;
        TOP + PLOT_H * (1.0 - (value - low) / (high - low))
    }

    /// The next legend entry, in the next color; returns that color.
    fn legend(&mut self, name: &str) -> &'static str {
        let color = COLORS[self.legend_rows % COLORS.len()];
        let y = TOP + 20.0 * self.legend_rows as f64 + 10.0;
        let _ = writeln!(
            self.out,
            r#"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            WIDTH - RIGHT + 15.0,
            WIDTH - RIGHT + 40.0,
            WIDTH - RIGHT + 46.0,
            y + 4.0
        );
        self.legend_rows += 1;
        color
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// The accuracy axis: from the tenth below `lowest` to 1, grid lines every 0.05 (0.1 for
/// wide ranges).
fn accuracy_axis(lowest: f64) -> (&'static str, (f64, f64), f64) {
    let floor = (lowest * 10.0).floor() / 10.0;
    let step = if 1.0 - floor > 0.5 { 0.1 } else { 0.05 };
    ("test accuracy", (floor, 1.0), step)
}

/// One line per method: its name and the mean test accuracy after each epoch.
pub fn svg(title: &str, curves: &[(String, Vec<f64>)]) -> String {
    let lowest = curves
        .iter()
        .flat_map(|(_, c)| c)
        .fold(1.0_f64, |a, &b| a.min(b));
    epoch_curves(title, curves, accuracy_axis(lowest))
}

/// One line per method: its name and the sharpness `L(w + e) - L(w)` after each epoch.
pub fn sharpness_svg(title: &str, curves: &[(String, Vec<f64>)]) -> String {
    let values = curves.iter().flat_map(|(_, c)| c).filter(|v| v.is_finite());
    let (low, high) = values.fold((0.0_f64, 0.0_f64), |(l, h), &v| (l.min(v), h.max(v)));
    let high = if high > low { high } else { low + 1.0 };
    let step = nice_step((high - low) / 8.0);
    let range = ((low / step).floor() * step, (high / step).ceil() * step);
    epoch_curves(title, curves, ("sharpness L(w + e) - L(w)", range, step))
}

/// The 1, 2 or 5 times a power of ten nearest above `rough`.
fn nice_step(rough: f64) -> f64 {
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

/// One line per method over the epochs, on the given y axis; non-finite points are skipped.
fn epoch_curves(
    title: &str,
    curves: &[(String, Vec<f64>)],
    y_axis: (&str, (f64, f64), f64),
) -> String {
    let epochs = curves
        .iter()
        .map(|(_, c)| c.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let ticks: Vec<(f64, String)> = (1..=epochs)
        .filter(|e| *e == 1 || e % (epochs / 6).max(1) == 0)
        .map(|e| (e as f64, e.to_string()))
        .collect();
    let x_axis = ("epoch", (1.0, epochs as f64), &ticks[..]);
    let mut frame = Frame::new(title, x_axis, y_axis);
    for (name, curve) in curves {
        let color = frame.legend(name);
        let points: Vec<String> = curve
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(e, &v)| format!("{:.1},{:.1}", frame.x(e as f64 + 1.0), frame.y(v)))
            .collect();
        let _ = writeln!(
            frame.out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
    frame.finish()
}

/// One point per method: (name, seconds per epoch, mean final test accuracy, its sd), with a
/// bar of one sd.
pub fn trade_off_svg(title: &str, points: &[(String, f64, f64, f64)]) -> String {
    let slowest = points.iter().fold(0.0_f64, |a, p| a.max(p.1)) * 1.15;
    let lowest = points
        .iter()
        .fold(1.0_f64, |a, p| a.min(p.2 - p.3))
        .max(0.0);
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let seconds = slowest * i as f64 / 5.0;
            (seconds, format!("{seconds:.3}"))
        })
        .collect();
    let x_axis = ("seconds per epoch", (0.0, slowest), &ticks[..]);
    let mut frame = Frame::new(title, x_axis, accuracy_axis(lowest));
    for (name, seconds, mean, sd) in points {
        let color = frame.legend(name);
        let (x, y) = (frame.x(*seconds), frame.y(*mean));
        let (high, low) = (
            frame.y((mean + sd).min(1.0)),
            frame.y((mean - sd).max(frame.y_range.0)),
        );
        let _ = writeln!(
            frame.out,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{high:.1}" y2="{low:.1}" stroke="{color}" stroke-width="2"/><circle cx="{x:.1}" cy="{y:.1}" r="5" fill="{color}"/>"#
        );
    }
    frame.finish()
}
