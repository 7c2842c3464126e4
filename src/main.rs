fn main() {
    println!("rea");
}
