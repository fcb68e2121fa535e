//! Test-accuracy curves per epoch as an SVG line chart.

use std::fmt::Write;

/// One line per method: its name and the mean test accuracy after each epoch.
pub fn svg(title: &str, curves: &[(String, Vec<f64>)]) -> String {
    const COLORS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    let (width, height, left, right, top, bottom) = (720.0, 440.0, 60.0, 150.0, 40.0, 50.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let epochs = curves
        .iter()
        .map(|(_, c)| c.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let lowest = curves
        .iter()
        .flat_map(|(_, c)| c)
        .fold(1.0_f64, |a, &b| a.min(b));
    let floor = (lowest * 10.0).floor() / 10.0;
    let x = |epoch: usize| left + plot_w * (epoch as f64 - 1.0) / (epochs as f64 - 1.0);
    let y = |accuracy: f64| top + plot_h * (1.0 - (accuracy - floor) / (1.0 - floor));

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="24" font-size="14">{title}</text>"#
    );
    // Horizontal grid lines every 0.05 (or 0.1 for wide ranges) of accuracy.
    let step = if 1.0 - floor > 0.5 { 0.1 } else { 0.05 };
    let mut level = floor;
    while level <= 1.0 + 1e-9 {
        let _ = writeln!(
            out,
            r##"<line x1="{left}" x2="{}" y1="{y0:.1}" y2="{y0:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{level:.2}</text>"##,
            left + plot_w,
            left - 6.0,
            y(level) + 4.0,
            y0 = y(level),
        );
        level += step;
    }
    for epoch in (1..=epochs).filter(|e| *e == 1 || e % (epochs / 6).max(1) == 0) {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{epoch}</text>"#,
            x(epoch),
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">epoch</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">test accuracy</text>"#,
        left + plot_w / 2.0,
        height - 10.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    for (i, (name, curve)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> = curve
            .iter()
            .enumerate()
            .map(|(e, &a)| format!("{:.1},{:.1}", x(e + 1), y(a)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let legend_y = top + 20.0 * i as f64 + 10.0;
        let _ = writeln!(
            out,
            r#"<line x1="{}" x2="{}" y1="{legend_y}" y2="{legend_y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            width - right + 15.0,
            width - right + 40.0,
            width - right + 46.0,
            legend_y + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}
